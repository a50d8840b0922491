"""Every branch of the verbalized and SKR-prompt decision logic, through a scripted chat
model whose replies and token log-probabilities are fixed by the test.

The real-model tests (``test_verbalized.py``) show that real replies go through these
branches; here each branch is pinned down whatever a real model would say.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pytest

from adaptive_gates import SKRPromptGate, VerbalizedGate
from adaptive_gates.answering.prompts import CHALLENGE, JUDGEMENT, QA, SKR_ALTERNATIVES, SKR_PROMPT, STRATEGIES, fill
from adaptive_gates.errors import BackendError
from adaptive_gates.models.chat.base import ChatModel, ChatReply, Message, SyncChatModel, TokenLogprob, with_achat

Script = ChatReply | Exception | Callable[[str], ChatReply]
_JUDGEMENT_OPENING = JUDGEMENT.split("\n")[0]


class ScriptedChat:
    """The chat protocol with fixed replies, chosen by the kind of turn asked.

    ``script`` maps ``"ask"`` (a first prompt), ``"judgement"`` and ``"challenge"`` to a
    reply, an exception to raise, or a function of the last user message (to answer
    the questions of a batch differently). Every conversation asked is kept in ``calls``.
    """

    model_id = "scripted-chat"

    def __init__(self, script: Mapping[str, Script]) -> None:
        self.script = dict(script)
        self.calls: list[list[dict[str, str]]] = []

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply:
        conversation = [dict(m) for m in messages]
        self.calls.append(conversation)
        last = conversation[-1]["content"]
        if last == CHALLENGE:
            kind = "challenge"
        elif last.startswith(_JUDGEMENT_OPENING):
            kind = "judgement"
        else:
            kind = "ask"
        reply = self.script[kind]
        if isinstance(reply, Exception):
            raise reply
        return reply(last) if callable(reply) else reply


def tok(text: str, p: float, alternatives: Mapping[str, float] | None = None) -> TokenLogprob:
    """A generated token of probability ``p``; ``alternatives`` (token -> probability)
    join it among the position's top alternatives."""
    top = {text: p, **(alternatives or {})}
    ranked = sorted(top.items(), key=lambda item: -item[1])
    return TokenLogprob(text, math.log(p), tuple((t, math.log(q)) for t, q in ranked))


def reply_of(*tokens: TokenLogprob) -> ChatReply:
    """A reply whose text is its tokens' text."""
    return ChatReply("".join(t.token for t in tokens), tokens)


QUESTION = "What is the capital of France?"


def test_scripted_chat_speaks_the_chat_protocol() -> None:
    # It has only ``chat``: gates lend it an ``achat`` that asks it in a worker thread.
    assert isinstance(ScriptedChat({}), SyncChatModel) and not isinstance(ScriptedChat({}), ChatModel)
    assert isinstance(with_achat(ScriptedChat({})), ChatModel)


class DeclaredOptions(ScriptedChat):
    """A chat model of one's own whose ``chat`` and ``achat`` both declare the four
    ``ChatOptions`` keywords themselves."""

    async def achat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply:
        return self.chat(messages, max_tokens=max_tokens, temperature=temperature, top_logprobs=top_logprobs, stop=stop)


def test_a_chat_model_declaring_the_option_keywords_is_a_chat_model() -> None:
    model: ChatModel = DeclaredOptions({"ask": ChatReply("Paris, certain.")})  # and so to mypy
    assert isinstance(model, ChatModel) and with_achat(model) is model
    decision = asyncio.run(VerbalizedGate(model).adecide(QUESTION))
    assert not decision.retrieve and decision.draft_answer == "Paris"


# ----------------------------------------------------------------------------- verbalized
def test_a_marker_decides_in_one_call_and_a_certain_reply_keeps_its_draft() -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris, certain.")})
    decision = VerbalizedGate(chat).decide(QUESTION)
    assert not decision.retrieve and decision.score == 0.0 and decision.error is None
    assert decision.draft_answer == "Paris"
    assert decision.details["certainty"] == "certain" and decision.details["certainty_from"] == "reply"
    assert decision.llm_calls == 1 and len(chat.calls) == 1
    assert chat.calls[0] == [{"role": "user", "content": fill(STRATEGIES["vanilla"], question=QUESTION)}]


def test_an_uncertain_marker_retrieves_without_a_draft() -> None:
    decision = VerbalizedGate(ScriptedChat({"ask": ChatReply("Lyon (uncertain)")})).decide(QUESTION)
    assert decision.retrieve and decision.score == 1.0 and decision.error is None
    assert decision.draft_answer is None and decision.details["answer"] == "Lyon"
    assert decision.answer_without_retrieval == "Lyon"  # what the retrieval replaces


def test_no_marker_asks_the_judgement_prompt_about_the_answer() -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris"), "judgement": ChatReply("Certain.")})
    decision = VerbalizedGate(chat).decide(QUESTION)
    assert chat.calls[1] == [{"role": "user", "content": fill(JUDGEMENT, question=QUESTION, prediction="Paris")}]
    assert decision.llm_calls == 2 and decision.details["certainty_from"] == "judgement"
    assert decision.details["judgement_reply"] == "Certain."
    assert not decision.retrieve and decision.draft_answer == "Paris"


@pytest.mark.parametrize("fallback_retrieve", [True, False])
def test_a_silent_judgement_gives_the_fallback_decision(fallback_retrieve: bool) -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris"), "judgement": ChatReply("The capital of France is Paris.")})
    decision = VerbalizedGate(chat, fallback_retrieve=fallback_retrieve).decide(QUESTION)
    assert decision.retrieve is fallback_retrieve and math.isnan(decision.score)
    assert decision.error == "unparseable: the reply states no certainty and neither does the judgement"
    assert decision.details["certainty"] is None and decision.llm_calls == 2
    # The answer given is kept for evaluations, never served from a fallback.
    assert decision.answer_without_retrieval == "Paris" and decision.draft_answer is None


def test_without_judge_a_reply_without_marker_falls_back_after_one_call() -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris")})
    decision = VerbalizedGate(chat, judge=False).decide(QUESTION)
    assert decision.retrieve and decision.error == "unparseable: the reply states no certainty"
    assert len(chat.calls) == 1


def _weighing_judgement(p_certain: float, p_uncertain: float) -> ChatReply:
    """A judgement that restates the answer while its first token weighs the two words."""
    return reply_of(tok("The", 0.5, {"Cert": p_certain, "Unc": p_uncertain}), tok(" answer is Paris.", 0.9))


def test_the_judgements_first_token_does_not_decide_by_default() -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris"), "judgement": _weighing_judgement(0.1, 0.3)})
    decision = VerbalizedGate(chat).decide(QUESTION)
    assert decision.is_fallback and decision.retrieve and decision.details["p_uncertain"] is None


@pytest.mark.parametrize(
    ("p_certain", "p_uncertain", "retrieve", "score"), [(0.3, 0.1, False, 0.25), (0.1, 0.3, True, 0.75)]
)
def test_the_first_token_option_lets_the_judgements_first_token_decide(
    p_certain: float, p_uncertain: float, retrieve: bool, score: float
) -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris"), "judgement": _weighing_judgement(p_certain, p_uncertain)})
    decision = VerbalizedGate(chat, unparseable="first-token").decide(QUESTION)
    assert decision.error is None and decision.retrieve is retrieve
    assert decision.score == pytest.approx(score)
    assert decision.details["certainty_from"] == "judgement (first-token probabilities)"
    assert decision.draft_answer == (None if retrieve else "Paris")


def test_the_first_token_option_falls_back_when_neither_word_is_weighed() -> None:
    judgement = reply_of(tok("The", 0.5, {"Paris": 0.3}), tok(" answer is Paris.", 0.9))
    chat = ScriptedChat({"ask": ChatReply("Paris"), "judgement": judgement})
    decision = VerbalizedGate(chat, unparseable="first-token").decide(QUESTION)
    assert decision.is_fallback and decision.error.endswith("nor does its first token weigh the two words")


def test_the_first_token_option_never_reads_the_first_reply() -> None:
    """A first reply's first token is the answer: the question could steer it."""
    chat = ScriptedChat({"ask": reply_of(tok("Paris", 0.4, {"Certain": 0.35}))})
    decision = VerbalizedGate(chat, judge=False, unparseable="first-token").decide(QUESTION)
    assert decision.is_fallback and decision.details["p_uncertain"] is None


def test_bad_unparseable_option_is_refused() -> None:
    with pytest.raises(ValueError, match="unparseable"):
        VerbalizedGate(ScriptedChat({}), unparseable="guess")


def test_a_certain_reply_keeps_its_draft_however_the_spellings_of_uncertain_add_up() -> None:
    """ " certain" is the greedy token, but " uncertain" and " Uncertain" together
    outweigh it: the stated word decides, the score stays on its side of 0.5."""
    reply = reply_of(tok("Paris", 0.9), tok(",", 0.9), tok(" certain", 0.4, {" uncertain": 0.3, " Uncertain": 0.25}))
    decision = VerbalizedGate(ScriptedChat({"ask": reply})).decide(QUESTION)
    assert decision.details["p_uncertain"] == pytest.approx(0.55 / 0.95)
    assert decision.details["certainty"] == "certain"
    assert not decision.retrieve and decision.draft_answer == "Paris"
    assert decision.score == 0.5 and not decision.score > decision.threshold


def test_an_uncertain_reply_retrieves_however_the_spellings_of_certain_add_up() -> None:
    reply = reply_of(tok("Lyon", 0.9), tok(",", 0.9), tok(" uncertain", 0.4, {" certain": 0.3, " Certain": 0.25}))
    decision = VerbalizedGate(ScriptedChat({"ask": reply})).decide(QUESTION)
    assert decision.details["p_uncertain"] == pytest.approx(0.4 / 0.95)
    assert decision.retrieve and decision.score > decision.threshold == 0.5


def _leaning_certain(p_uncertain: float) -> ChatReply:
    return reply_of(tok("Paris", 0.9), tok(",", 0.9), tok(" certain", 1 - p_uncertain, {" uncertain": p_uncertain}))


def _calibrated_near(gate, threshold: float):
    """``gate`` calibrated (on a spread of scores) to a threshold near ``threshold``."""
    gate.calibrate_scores(np.linspace(0.005, 0.995, 100), target_rate=1 - threshold)
    assert gate.threshold_ == pytest.approx(threshold, abs=0.01)
    return gate


def test_a_graded_certain_reply_retrieves_only_under_a_calibrated_threshold_below_it() -> None:
    gate = VerbalizedGate(ScriptedChat({"ask": _leaning_certain(0.4)}))
    uncalibrated = gate.decide(QUESTION)
    assert uncalibrated.score == pytest.approx(0.4) and not uncalibrated.retrieve
    assert uncalibrated.draft_answer == "Paris"
    calibrated = _calibrated_near(gate, 0.3).decide(QUESTION)
    assert calibrated.score == pytest.approx(0.4) and calibrated.retrieve
    assert calibrated.threshold == gate.threshold_ and calibrated.draft_answer is None
    assert not gate.reset_threshold().decide(QUESTION).retrieve


def test_a_certain_reply_without_an_answer_retrieves() -> None:
    decision = VerbalizedGate(ScriptedChat({"ask": ChatReply("Certain.")})).decide(QUESTION)
    assert decision.retrieve and decision.score == 1.0 and decision.draft_answer is None
    assert decision.details["note"] == "certain, but the reply holds no answer to reuse"


def test_challenge_asks_a_second_turn_and_keeps_the_first_answer() -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris"), "challenge": ChatReply("I am still certain.")})
    decision = VerbalizedGate(chat, strategy="challenge").decide(QUESTION)
    first = {"role": "user", "content": fill(QA, question=QUESTION)}
    second = [first, {"role": "assistant", "content": "Paris"}, {"role": "user", "content": CHALLENGE}]
    assert chat.calls == [[first], second]
    assert decision.details["certainty_from"] == "challenge" and decision.llm_calls == 2
    assert not decision.retrieve and decision.draft_answer == "Paris"


def test_challenge_apology_retrieves() -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris"), "challenge": ChatReply("I apologize for the mistake.")})
    decision = VerbalizedGate(chat, strategy="challenge").decide(QUESTION)
    assert decision.retrieve and decision.details["marker_source"] == "refusal"


def test_challenge_reply_without_certainty_goes_to_the_judgement() -> None:
    chat = ScriptedChat(
        {
            "ask": ChatReply("Paris"),
            "challenge": ChatReply("Paris is the capital."),
            "judgement": ChatReply("uncertain"),
        }
    )
    decision = VerbalizedGate(chat, strategy="challenge").decide(QUESTION)
    assert len(chat.calls) == 3 and decision.llm_calls == 3
    assert chat.calls[2][0]["content"] == fill(JUDGEMENT, question=QUESTION, prediction="Paris")
    assert decision.details["certainty_from"] == "judgement" and decision.retrieve


@pytest.mark.parametrize("failing", ["ask", "judgement", "challenge"])
def test_a_failing_call_gives_the_fallback_decision(failing: str) -> None:
    script: dict[str, Script] = {
        "ask": ChatReply("Paris"),
        "judgement": ChatReply("certain"),
        "challenge": ChatReply("Paris"),
    }
    script[failing] = BackendError("server said 500")
    strategy = "challenge" if failing == "challenge" else "vanilla"
    decision = VerbalizedGate(ScriptedChat(script), strategy=strategy).decide(QUESTION)
    assert decision.is_fallback and decision.retrieve
    assert decision.error == "backend error: BackendError: server said 500"


def test_each_question_of_a_batch_gets_its_own_reply() -> None:
    replies = {"France": ChatReply("Paris, certain"), "Peru": ChatReply("Quito, uncertain")}
    chat = ScriptedChat({"ask": lambda prompt: next(r for k, r in replies.items() if k in prompt)})
    certain, uncertain = VerbalizedGate(chat).decide_batch([QUESTION, "What is the capital of Peru?"])
    assert (certain.retrieve, certain.draft_answer) == (False, "Paris")
    assert (uncertain.retrieve, uncertain.draft_answer) == (True, None)


# ----------------------------------------------------------------------------- SKR prompt
@pytest.mark.parametrize(
    ("text", "first_word", "retrieve"),
    [
        ("No, I don't need additional information.", "no", False),
        ("A: No.", "no", False),
        ("Yes, I need more information.", "yes", True),
        ("I think I can answer it.", "i", True),
        ("", "", True),
    ],
)
def test_skr_prompt_the_paper_rule_only_no_means_known(text: str, first_word: str, retrieve: bool) -> None:
    chat = ScriptedChat({"ask": ChatReply(text)})
    decision = SKRPromptGate(chat).decide(QUESTION)
    assert chat.calls == [[{"role": "user", "content": fill(SKR_PROMPT, question=QUESTION)}]]
    assert decision.details["first_word"] == first_word and decision.details["known"] is not retrieve
    assert decision.retrieve is retrieve and decision.score == float(retrieve) and decision.error is None
    assert decision.draft_answer is None and decision.llm_calls == 1


def test_skr_prompt_a_greedy_no_stays_known_however_the_spellings_of_yes_add_up() -> None:
    reply = reply_of(tok("No", 0.4, {"Yes": 0.35, " yes": 0.25}), tok(", I don't.", 0.9))
    decision = SKRPromptGate(ScriptedChat({"ask": reply})).decide(QUESTION)
    assert decision.details["p_retrieve"] == pytest.approx(0.6)
    assert decision.details["known"] and not decision.retrieve
    assert decision.score == 0.5 and not decision.score > decision.threshold


def test_skr_prompt_a_greedy_yes_retrieves_however_the_spellings_of_no_add_up() -> None:
    reply = reply_of(tok("Yes", 0.4, {"No": 0.35, " no": 0.25}))
    decision = SKRPromptGate(ScriptedChat({"ask": reply})).decide(QUESTION)
    assert decision.details["p_retrieve"] == pytest.approx(0.4)
    assert decision.retrieve and decision.score > decision.threshold == 0.5


def test_skr_prompt_grades_its_score_and_follows_a_calibrated_threshold() -> None:
    reply = reply_of(tok(" No", 0.6, {"Yes": 0.3, "Ye": 0.1}))
    gate = SKRPromptGate(ScriptedChat({"ask": reply}))
    uncalibrated = gate.decide(QUESTION)
    assert uncalibrated.score == pytest.approx(0.4) and not uncalibrated.retrieve
    calibrated = _calibrated_near(gate, 0.3).decide(QUESTION)
    assert calibrated.score == pytest.approx(0.4) and calibrated.retrieve


def test_skr_prompt_reads_probabilities_only_where_the_first_word_begins() -> None:
    """Tokens "N" + "o" do not choose the word at one position: the score stays discrete."""
    reply = reply_of(tok("N", 0.5, {"Yes": 0.45}), tok("o", 0.9))
    decision = SKRPromptGate(ScriptedChat({"ask": reply})).decide(QUESTION)
    assert decision.details["p_retrieve"] is None and decision.score == 0.0 and not decision.retrieve


@pytest.mark.parametrize(("text", "retrieve"), [("Yes, I can.", False), ("No.", True), ("Maybe.", True)])
def test_skr_prompt_yes_means_known_polarity(text: str, retrieve: bool) -> None:
    template, known = SKR_ALTERNATIVES["solve-now"]
    chat = ScriptedChat({"ask": ChatReply(text)})
    decision = SKRPromptGate(chat, template=template, known_reply=known).decide(QUESTION)
    assert chat.calls[0][0]["content"] == fill(template, question=QUESTION)
    assert decision.retrieve is retrieve and decision.details["known"] is not retrieve


def test_skr_prompt_yes_means_known_grades_by_the_probability_of_no() -> None:
    template, known = SKR_ALTERNATIVES["solve-now"]
    reply = reply_of(tok("Yes", 0.7, {"No": 0.2, "no": 0.1}))
    decision = SKRPromptGate(ScriptedChat({"ask": reply}), template=template, known_reply=known).decide(QUESTION)
    assert decision.details["p_retrieve"] == pytest.approx(0.3) and decision.score == pytest.approx(0.3)
    assert not decision.retrieve


def test_skr_prompt_failing_backend_gives_the_fallback_decision() -> None:
    decision = SKRPromptGate(ScriptedChat({"ask": BackendError("timed out")})).decide(QUESTION)
    assert decision.is_fallback and decision.retrieve and decision.error == "backend error: BackendError: timed out"
    assert decision.llm_calls == 1  # the failed request was made


class _BatchFailing:
    """A batching chat model whose batch call raises ``error``; one by one it answers."""

    model_id = "batch-failing"

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.single_calls = 0

    def chat_batch(self, conversations, **options):
        raise self.error

    def chat(self, messages, **options):
        self.single_calls += 1
        return ChatReply("Paris. certain")


def test_a_failing_batch_is_asked_one_conversation_at_a_time():
    model = _BatchFailing(BackendError("the batch ran out of memory"))
    decisions = VerbalizedGate(model).decide_batch(["What is the capital of France?", "Who wrote Hamlet?"])
    assert model.single_calls == 2 and [d.draft_answer for d in decisions] == ["Paris", "Paris"]


def test_a_bug_in_a_batch_is_no_quiet_retry():
    model = _BatchFailing(TypeError("chat_batch() got an unexpected keyword argument 'top_logprobs'"))
    decisions = VerbalizedGate(model).decide_batch(["What is the capital of France?", "Who wrote Hamlet?"])
    assert model.single_calls == 0
    assert all(d.is_fallback and "TypeError" in d.error for d in decisions)
