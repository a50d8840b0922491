"""Input that is wrong never passes for right: outcomes that are no outcomes, questions
a gate cannot judge, questions that show nothing, padded queries, more neighbours than the memory holds, replies
longer than asked for, questions that cannot be encoded, prompts past the model's window."""

from __future__ import annotations

import gzip
import json
import math
import re
import tracemalloc

import numpy as np
import pytest

from adaptive_gates import (
    BM25DifficultyGate,
    BudgetedGate,
    DataFormatError,
    GateLoadError,
    InvalidQuestionError,
    LogprobGate,
    PopularityGate,
    SKRKnnGate,
    VerbalizedGate,
    load_gate,
    load_outcomes,
)
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.cli import main
from adaptive_gates.models import ChatReply, TokenLogprob, TokenUsage
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
from adaptive_gates.persistence.saved_format import with_checksums
from adaptive_gates.records.data import MAX_LINE_BYTES, write_jsonl
from support.openai_server import Fault

LONE_SURROGATE = "Who is \ud800?"


@pytest.fixture(scope="module")
def nq():
    return adarague_outcomes("nq")


@pytest.fixture(scope="module")
def trivia_questions():
    return [r.question for r in adarague_outcomes("trivia")[:120]]


# ----------------------------------------------------------------------------- outcomes
@pytest.mark.parametrize(
    "bad, which",
    [
        ([math.nan] * 30, "correct_without"),
        ([2] * 30, "correct_without"),
        ([-1] * 30, "correct_without"),
        (["1"] * 30, "correct_without"),
        ([None] * 30, "correct_with"),
    ],
)
def test_calibration_refuses_outcomes_that_are_not_outcomes(nq, bad, which):
    questions = [r.question for r in nq[:30]]
    good = [1] * 30
    outcomes = {"correct_without": good, "correct_with": good, which: bad}
    gate = PopularityGate()
    with pytest.raises(ValueError, match=rf"{which}\[0\] must be 0/1, a bool or a graded score in \[0, 1\]"):
        gate.calibrate(questions, **outcomes)
    assert gate.calibration_ is None


def test_calibration_takes_0_1_bools_and_graded_scores(nq):
    questions = [r.question for r in nq[:30]]
    without = [i % 2 == 0 for i in range(30)]
    for with_ in ([1] * 30, [True] * 30, [0.5 + 0.5 * (i % 3 == 0) for i in range(30)]):
        gate = PopularityGate().calibrate(questions, correct_without=without, correct_with=with_)
        assert gate.calibration_.method == "objective"


# ----------------------------------------------------------------------------- popularity
UNJUDGEABLE = ["who is it?", "???", "12345"]


@pytest.mark.parametrize("fallback_retrieve", [True, False])
def test_popularity_falls_back_on_a_question_it_cannot_judge(fallback_retrieve):
    gate = PopularityGate(fallback_retrieve=fallback_retrieve)
    decisions = gate.decide_batch([*UNJUDGEABLE, LONE_SURROGATE, "Who wrote Hamlet?"])
    for decision in decisions[:3]:
        assert decision.is_fallback
        assert decision.retrieve is fallback_retrieve
        assert "no content word to judge the subject's popularity by" in decision.error
    assert decisions[3].is_fallback and "cannot be encoded as UTF-8" in decisions[3].error
    assert not decisions[4].is_fallback and decisions[4].error is None
    entity = PopularityGate(rule="entity").decide("???")
    assert entity.is_fallback and "no content word or capitalised name" in entity.error


@pytest.mark.parametrize("fallback_retrieve", [True, False])
def test_popularity_scores_say_what_its_decisions_do(fallback_retrieve, trivia_questions):
    """Offline evaluation and the stacked gate read ``score``: an unjudged question
    is scored where its fallback decision stands, at any threshold."""
    questions = [*UNJUDGEABLE, *trivia_questions[:40]]
    gate = PopularityGate(fallback_retrieve=fallback_retrieve)
    for rate in (0.2, 0.5, 0.8):
        gate.calibrate(trivia_questions, rate)
        decided = [d.retrieve for d in gate.decide_batch(questions)]
        assert gate.retrieves(gate.score(questions)).tolist() == decided


def test_a_budgeted_popularity_gate_falls_back_too():
    decision = BudgetedGate(PopularityGate(), target_rate=0.3).decide("???")
    assert decision.is_fallback and "popularity" in decision.error


# ----------------------------------------------------------------------------- questions that show nothing
#: Questions of control, format and separator characters only, each with the code points named.
INVISIBLE = {
    "\x00\x00": "U+0000 U+0000",
    "\u200b\u200b": "U+200B U+200B",
    "\ufeff": "U+FEFF",
    "\u2060": "U+2060",
    " \u200d\u00ad\u3000\u2028\U000e0041\ufe0f\u3164\x7f ": "U+200D U+00AD U+3000 U+2028 U+E0041 U+FE0F and 2 more",
}


@pytest.fixture(scope="module")
def skr_gate(embedder, nq):
    return SKRKnnGate(embedder, k=5).fit([r.question for r in nq[:20]], [i % 2 for i in range(20)])


@pytest.mark.parametrize("question", list(INVISIBLE))
def test_a_question_that_shows_nothing_is_refused_as_an_empty_one(skr_gate, question):
    refused = rf"a question must hold a visible character, got only invisible ones \({re.escape(INVISIBLE[question])}\)"
    with pytest.raises(InvalidQuestionError, match=rf"question 1: {refused}"):
        skr_gate.score(["Who wrote Hamlet?", question])
    with pytest.raises(InvalidQuestionError, match=refused):
        skr_gate.record_feedback(question, retrieved=False, correct=True)  # the memory learns no such question
    assert len(skr_gate.memory_) == 20
    decision = skr_gate.decide(question)
    assert decision.is_fallback and decision.retrieve
    assert re.match(f"invalid question: {refused}", decision.error)


def test_invisible_characters_beside_visible_ones_leave_a_question_judged(skr_gate):
    for question in ("\ufeffWho wrote Hamlet?", "Who\u200b wrote\u2060 Hamlet?\x00"):
        decision = skr_gate.decide(question)
        assert decision.error is None and not decision.is_fallback


# ----------------------------------------------------------------------------- bm25-difficulty
PADDINGS = [" who" * 200, " please" * 50, " what is the name of" * 20, " Who? Who? who who who"]


@pytest.fixture(scope="module")
def bm25_gate(nq):
    return BM25DifficultyGate().fit([r.question for r in nq[:300]])


def test_repeated_or_filler_words_do_not_swing_a_decision(bm25_gate, trivia_questions):
    threshold = bm25_gate.threshold_
    plain = bm25_gate.score(trivia_questions)
    for padding in PADDINGS:
        padded = bm25_gate.score([q + padding for q in trivia_questions])
        flips = int(np.sum((plain > threshold) != (padded > threshold)))
        assert flips == 0, f"{padding[:20]!r}: {flips} of {len(trivia_questions)} decisions moved"
    repeated = bm25_gate.score([trivia_questions[0] + " " + trivia_questions[0]])[0]
    assert repeated == pytest.approx(plain[0])


def _edit_state(path, edit):
    config = json.loads((path / "config.json").read_text())
    edit(config["state"])
    (path / "config.json").write_text(json.dumps(with_checksums(config)))


def test_a_bm25_gate_saved_before_the_rule_keeps_its_terms(bm25_gate, trivia_questions, tmp_path):
    path = bm25_gate.save(tmp_path / "bm25")
    question = trivia_questions[0]
    assert load_gate(path).score([question + " who" * 50])[0] == pytest.approx(bm25_gate.score([question])[0])
    _edit_state(path, lambda state: state.pop("query_terms"))  # as saved before the rule
    legacy = load_gate(path)
    assert legacy.score([question + " who" * 50])[0] < legacy.score([question])[0] - 1  # repeats counted
    _edit_state(path, lambda state: state.update(query_terms="some"))
    with pytest.raises(GateLoadError, match=r"field 'state\.query_terms'"):
        load_gate(path)


# ----------------------------------------------------------------------------- skr-knn's k
def test_more_neighbours_than_the_memory_holds_warns_naming_the_k_used(embedder, nq):
    questions, labels = [r.question for r in nq[:20]], [i % 2 for i in range(20)]
    with pytest.warns(UserWarning, match="k=50 neighbours of a memory of 20 questions.*k=20 is used"):
        gate = SKRKnnGate(embedder, k=50).fit(questions, labels)
    decisions = gate.decide_batch(["Who wrote Hamlet?", "What is the capital of Peru?"])
    assert [d.details["k"] for d in decisions] == [20, 20]
    assert len({d.score for d in decisions}) == 1  # the whole memory votes for every question


def test_eval_with_k_beyond_the_memory_says_the_k_used(nq, tmp_path, capsys):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    write_jsonl(train, [r.to_json() for r in nq[:200]])
    write_jsonl(test, [r.to_json() for r in nq[200:260]])
    status = main(
        [
            "eval",
            "--gate",
            "skr-knn",
            "--train",
            str(train),
            "--test",
            str(test),
            "--option",
            "k=1000000",
            "--json",
            str(tmp_path / "report.json"),
        ]
    )
    assert status == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("adaptive-gates: warning:")]
    assert warned and all(
        re.search(r"k=1000000 neighbours of a memory of (\d+) questions.*k=\1 is used", w) for w in warned
    )


# ----------------------------------------------------------------------------- over-long replies
class Scripted:
    """A chat model that answers every request with one fixed reply (a faulty backend)."""

    def __init__(self, reply: ChatReply) -> None:
        self.reply = reply
        self.model_id = "scripted"

    def chat(self, messages, *, max_tokens=64, temperature=0.0, top_logprobs=0, stop=None) -> ChatReply:
        return self.reply


def _tokens(n: int) -> tuple[TokenLogprob, ...]:
    return tuple(TokenLogprob(" Paris", -0.01, ((" Paris", -0.01), (" Lyon", -5.0))) for _ in range(n))


@pytest.mark.parametrize(
    "reply, length",
    [
        (ChatReply("Paris. certain" + " x" * 25_000), "50014 characters long, more than 64 tokens hold"),
        (ChatReply("Paris. certain", usage=TokenUsage(20, 900)), "900 tokens long, more than the 64 asked for"),
        (ChatReply("Paris. certain", tokens=_tokens(65)), "65 tokens long, more than the 64 asked for"),
    ],
)
def test_a_reply_longer_than_asked_for_is_the_fallback(reply, length):
    decision = VerbalizedGate(Scripted(reply), max_tokens=64).decide("What is the capital of France?")
    assert decision.is_fallback and decision.retrieve
    assert f"MalformedReplyError: the reply is {length}" in decision.error
    assert decision.draft_answer is None


def test_a_reply_within_the_cap_keeps_its_draft():
    reply = ChatReply("Paris. certain", tokens=_tokens(64), usage=TokenUsage(20, 64))
    decision = VerbalizedGate(Scripted(reply), max_tokens=64).decide("What is the capital of France?")
    assert not decision.retrieve and decision.draft_answer == "Paris"


def test_a_long_reply_to_the_logprob_gate_is_no_draft():
    long_reply = ChatReply(" Paris" * 40, tokens=_tokens(40))
    decision = LogprobGate(Scripted(long_reply), max_tokens=16).decide("What is the capital of France?")
    assert decision.is_fallback and "40 tokens long, more than the 16 asked for" in decision.error
    assert decision.draft_answer is None


def test_a_server_ignoring_max_tokens_gets_no_draft_served(openai_server):
    chat = OpenAIChatModel(openai_server.model_id, base_url=openai_server.base_url)
    openai_server.set_fault(Fault.OVERLONG)
    decision = VerbalizedGate(chat, max_tokens=16).decide("What is the capital of France?")
    assert decision.is_fallback and decision.draft_answer is None
    assert "tokens long, more than the 16 asked for" in decision.error
    assert openai_server.requests == 1  # a malformed reply is not asked again


# ----------------------------------------------------------------------------- unencodable text
def test_a_lone_surrogate_is_named_and_never_sent(openai_server):
    chat = OpenAIChatModel(openai_server.model_id, base_url=openai_server.base_url)
    decision = VerbalizedGate(chat).decide(LONE_SURROGATE)
    assert decision.is_fallback
    assert "cannot be encoded as UTF-8: surrogates not allowed '\\ud800' at position 7" in decision.error
    with pytest.raises(InvalidQuestionError, match="message 0: content cannot be encoded as UTF-8"):
        chat.chat([{"role": "user", "content": LONE_SURROGATE}])
    assert openai_server.requests == 0


# ----------------------------------------------------------------------------- past the window
#: Over 80,000 of SmolLM2's tokens ("1" and " " are one each), ten times its 8,192-token window;
#: still 20,000 after a gate cuts a question to its first 20,000 characters.
FLOODED_QUESTION = "Who wrote Hamlet? " + "1 " * 40_000


def test_a_prompt_past_the_window_is_refused_by_every_call_before_any_work(lm):
    from adaptive_gates import ContextLengthExceededError
    from adaptive_gates.models import LocalChatModel

    calls = {
        "generate": lambda: lm.generate(FLOODED_QUESTION, max_new_tokens=4),
        "sample": lambda: lm.sample(FLOODED_QUESTION, 2, max_new_tokens=4),
        "stream": lambda: "".join(lm.stream(FLOODED_QUESTION, max_new_tokens=4)),
        "probe": lambda: lm.sample_with_states(FLOODED_QUESTION, 2, module_path="model.layers.1", max_new_tokens=4),
        "log-probs": lambda: lm.token_logprobs(FLOODED_QUESTION, " Shakespeare"),
        "chat": lambda: LocalChatModel(lm).chat([{"role": "user", "content": FLOODED_QUESTION}], max_tokens=4),
    }
    for name, call in calls.items():
        with pytest.raises(ContextLengthExceededError, match="past the model's context window of 8192 tokens") as err:
            call()
        assert err.value.window == 8192 and err.value.prompt_tokens > 80_000, name
    # The window counts the tokens asked for: a prompt that fits alone does not fit with them.
    with pytest.raises(ContextLengthExceededError, match="and 200 more were asked for") as err:
        lm.generate("1 " * 4_000, max_new_tokens=200)  # about 8,030 tokens
    assert err.value.prompt_tokens < 8_192 < err.value.prompt_tokens + 200


def test_a_gate_asked_past_its_models_window_falls_back_at_once(lm):
    from adaptive_gates.models import LocalChatModel

    decision = VerbalizedGate(LocalChatModel(lm)).decide(FLOODED_QUESTION)
    assert decision.is_fallback and decision.retrieve
    assert "past the model's context window" in decision.error


def test_a_gzip_line_of_hundreds_of_megabytes_is_refused_without_holding_it(tmp_path):
    """A 256 MiB line, a few hundred kilobytes compressed, at the real limit (64 MiB):
    refused naming the file and line, read no further than the limit."""
    path = tmp_path / "outcomes.jsonl.gz"
    good = json.dumps(
        {"id": "q1", "question": "q", "answers": ["a"], "pred_no_retrieval": "a", "pred_one_retrieval": "a"}
    )
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(good.encode() + b'\n{"question": "')
        chunk = b"w" * (1 << 24)
        for _ in range(16):
            fh.write(chunk)
        fh.write(b'"}\n')
    assert path.stat().st_size < 2_000_000
    tracemalloc.start()
    try:
        with pytest.raises(
            DataFormatError, match=re.escape(f"{path}:2: the line is longer than {MAX_LINE_BYTES:,} bytes")
        ):
            load_outcomes(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_LINE_BYTES + (16 << 20)  # the line up to the limit, never its 256 MiB
