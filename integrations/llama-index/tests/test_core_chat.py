"""Any LlamaIndex LLM behind the core's prompt-based gates (``LlamaIndexChatModel``),
run end to end on the embedded SmolLM2 as a LlamaIndex LLM."""

from __future__ import annotations

import math
from typing import Any

import pytest
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata, LogProb
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM, LlamaIndexChatModel
from llama_index.llms.adaptive_gates.core_chat import parse_logprobs
from llama_index.selectors.adaptive_gates import GateLLMCallEvent, forwarding_llm_calls

from adaptive_gates import BackendError, SKRPromptGate, VerbalizedGate
from adaptive_gates.models import ChatModel, LocalChatModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Questions SmolLM2 answers; under "first-token" the judgement's first-token
#: alternatives weigh "certain" against "uncertain" when they hold either word.
VERBALIZED_QUESTIONS = ["What is the capital of France?", "Who won the village election last year?"]
#: Questions SmolLM2 answers with a yes/no word: only then is P(retrieve) defined.
POLAR_QUESTIONS = ["Is Paris in France?", "Who painted the Mona Lisa?"]


class StrictLLM(CustomLLM):
    """A LlamaIndex LLM that takes no per-call options (its ``complete`` has no
    ``**kwargs``) and has no async path of its own; it answers with the embedded model."""

    inner: AdaptiveGatesLLM

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="strict-smollm2")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False) -> CompletionResponse:
        return self.inner.complete(prompt)

    def stream_complete(self, prompt: str, formatted: bool = False):
        raise NotImplementedError


class DownLLM(CustomLLM):
    """A LlamaIndex LLM whose service is down."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="down-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise ConnectionError("LLM service unreachable")

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        raise ConnectionError("LLM service unreachable")


@pytest.fixture(scope="module")
def adapted() -> LlamaIndexChatModel:
    return LlamaIndexChatModel(AdaptiveGatesLLM())


def test_is_the_core_chat_protocol_named_after_the_llm(adapted):
    assert isinstance(adapted, ChatModel)
    assert adapted.model_id == LocalChatModel().model_id
    assert LlamaIndexChatModel(DownLLM()).model_id == "down-llm"
    assert LlamaIndexChatModel(DownLLM(), model_id="mine").model_id == "mine"
    with pytest.raises(TypeError, match="LlamaIndex LLM"):
        LlamaIndexChatModel(LocalChatModel())


def test_replies_carry_the_llms_token_logprobs(adapted):
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    reply = adapted.chat(messages, max_tokens=6, top_logprobs=3)
    assert "paris" in reply.text.lower() and reply.tokens
    for token in reply.tokens:
        assert token.top[0][1] >= token.top[-1][1] and token.token in {alt for alt, _ in token.top}
        assert len(token.top) <= 3
    assert "".join(t.token for t in reply.tokens).strip().startswith(reply.text.strip()[:3])
    # The same reply as the core model's own, tokens and alternatives alike.
    core = LocalChatModel().chat(messages, max_tokens=6, top_logprobs=3)
    assert reply.text == core.text and [t.token for t in reply.tokens] == [t.token for t in core.tokens]
    for ours, theirs in zip(reply.tokens, core.tokens):
        assert [a for a, _ in ours.top] == [a for a, _ in theirs.top]
        assert ours.logprob == pytest.approx(theirs.logprob, abs=1e-4)
    assert adapted.chat(messages, max_tokens=6).tokens is None  # not asked for
    assert LlamaIndexChatModel(AdaptiveGatesLLM(), request_logprobs=False).chat(messages, top_logprobs=3).tokens is None


def test_stop_strings_cut_the_reply(adapted):
    messages = [{"role": "user", "content": "Describe Paris in one sentence."}]
    whole = adapted.chat(messages, max_tokens=12, top_logprobs=1)
    stop = whole.text.split()[2]  # a word within the reply, whatever it says
    cut = adapted.chat(messages, max_tokens=12, top_logprobs=1, stop=[stop, "never in the reply"])
    assert cut.text == whole.text[: whole.text.index(stop)] and cut.finish_reason == "stop"
    assert len("".join(t.token for t in cut.tokens)) >= len(cut.text) and len(cut.tokens) < len(whole.tokens)
    with pytest.raises(ValueError, match="stop strings"):
        adapted.chat(messages, stop=[""])
    with pytest.raises(ValueError, match="role must be one of"):  # the caller's mistake, not the LLM's
        adapted.chat([{"role": "tool", "content": "42"}])


def test_logprob_lists_convert_chosen_first_alternatives_best_first():
    lists = [
        [
            LogProb(token=" Paris", logprob=-0.2),
            LogProb(token=" The", logprob=-1.9),
            LogProb(token=" It", logprob=-1.1),
        ],
        [LogProb(token=".", logprob=-3.0), LogProb(token="!", logprob=-0.1)],  # sampled: not the likeliest
    ]
    first, second = parse_logprobs(lists)
    assert (first.token, first.logprob) == (" Paris", -0.2)
    assert first.top == ((" Paris", -0.2), (" It", -1.1), (" The", -1.9))
    assert (second.token, second.top) == (".", (("!", -0.1), (".", -3.0)))
    assert parse_logprobs(None) is None and parse_logprobs([]) is None
    assert parse_logprobs([[LogProb(token="a", logprob=-0.1)], []]) is None  # a position without a token
    assert parse_logprobs([[LogProb(token="a", logprob=math.nan)]]) is None


def test_verbalized_gate_on_the_adapted_llm_decides_as_on_the_core_model(adapted, recorder):
    options = {"unparseable": "first-token", "max_tokens": 12}  # replies as short as the questions need
    with forwarding_llm_calls():
        decisions = VerbalizedGate(adapted, **options).decide_batch(VERBALIZED_QUESTIONS)
    expected = VerbalizedGate(LocalChatModel(), **options).decide_batch(VERBALIZED_QUESTIONS)
    for got, want in zip(decisions, expected):
        assert got.gate == "verbalized" and isinstance(got.retrieve, bool) and got.retrieve == want.retrieve
        assert got.details["reply"] == want.details["reply"] and got.error == want.error
        assert got.llm_calls == want.llm_calls in (1, 2)
        assert (got.details["p_uncertain"] is None) == (want.details["p_uncertain"] is None)
        if want.details["p_uncertain"] is not None:
            assert got.details["p_uncertain"] == pytest.approx(want.details["p_uncertain"], abs=1e-3)
            assert got.score == pytest.approx(want.score, abs=1e-3)
    # The log-probs crossed LlamaIndex: P(uncertain) grades the score.
    assert any(d.details["p_uncertain"] is not None for d in decisions)

    calls = [e.call for e in recorder.events if isinstance(e, GateLLMCallEvent)]
    assert len(calls) == sum(d.llm_calls for d in decisions)
    assert {c["gate"] for c in calls} == {"verbalized"} and {c["model_id"] for c in calls} == {adapted.model_id}
    assert {c["purpose"] for c in calls} <= {"answer+certainty", "judgement"} and all(c["error"] is None for c in calls)
    assert [c["reply"] for c in calls if c["purpose"] == "answer+certainty"] == [d.details["reply"] for d in decisions]
    # Each request went through the LlamaIndex LLM, which fired its own chat events.
    assert len([e for e in recorder.events if isinstance(e, LLMChatEndEvent)]) == len(calls)


def test_verbalized_gate_without_logprobs_reads_the_words_alone():
    blind = LlamaIndexChatModel(AdaptiveGatesLLM(), request_logprobs=False)
    for decision in VerbalizedGate(blind, unparseable="first-token", max_tokens=12).decide_batch(VERBALIZED_QUESTIONS):
        assert decision.details["p_uncertain"] is None and "reply" in decision.details
        # Without alternatives the first token cannot weigh the words: either a stated
        # word decides (score 0 or 1) or the recorded fallback does.
        assert decision.score in (0.0, 1.0) or (decision.is_fallback and math.isnan(decision.score))


def test_skr_prompt_gate_on_the_adapted_llm_matches_the_core_model(adapted):
    core = SKRPromptGate(LocalChatModel()).decide_batch(POLAR_QUESTIONS)
    got = SKRPromptGate(adapted).decide_batch(POLAR_QUESTIONS)
    for a, b in zip(core, got):
        assert a.details["reply"] == b.details["reply"] and a.retrieve == b.retrieve and not b.is_fallback
        assert a.details["p_retrieve"] is not None and b.details["p_retrieve"] is not None
        assert b.details["p_retrieve"] == pytest.approx(a.details["p_retrieve"], abs=1e-4)
    blind = SKRPromptGate(LlamaIndexChatModel(AdaptiveGatesLLM(), request_logprobs=False))
    assert all(d.details["p_retrieve"] is None for d in blind.decide_batch(POLAR_QUESTIONS))


async def test_async_decisions_match_the_blocking_ones(adapted):
    gate = SKRPromptGate(adapted)
    awaited = await gate.adecide(POLAR_QUESTIONS[0])
    blocking = gate.decide(POLAR_QUESTIONS[0])
    assert awaited.details["reply"] == blocking.details["reply"] and awaited.retrieve == blocking.retrieve
    assert awaited.score == pytest.approx(blocking.score, abs=1e-6)


async def test_an_llm_without_options_or_async_path(brief_llm, loop_ticks):
    strict = StrictLLM(inner=brief_llm)
    messages = [{"role": "user", "content": "Who wrote Hamlet?"}]
    with pytest.raises(BackendError, match=r"strict-smollm2 failed: TypeError.*pass_options=False"):
        LlamaIndexChatModel(strict).chat(messages)
    plain = LlamaIndexChatModel(strict, pass_options=False, request_logprobs=False)
    reply = plain.chat(messages, top_logprobs=5)
    assert reply.text.strip() and reply.tokens is None

    # CustomLLM's own achat would run the blocking chat on the loop: it runs in a thread.
    async with loop_ticks:
        awaited = await plain.achat(messages)
    assert awaited.text == reply.text and loop_ticks.count > 0, "the event loop was blocked while the LLM answered"


@pytest.mark.parametrize("gate_type", [VerbalizedGate, SKRPromptGate])
async def test_a_failing_llm_ends_in_the_recorded_fallback(gate_type, recorder):
    gate = gate_type(LlamaIndexChatModel(DownLLM()))
    with forwarding_llm_calls():
        decision = gate.decide("Who wrote Hamlet?")
        awaited = await gate.adecide("Who wrote Hamlet?")
    for d in (decision, awaited):
        assert d.is_fallback and d.retrieve is True and math.isnan(d.score)
        assert "BackendUnavailableError: down-llm failed: ConnectionError: LLM service unreachable" in d.error
    calls = [e.call for e in recorder.events if isinstance(e, GateLLMCallEvent)]
    assert len(calls) == 2 and all(c["reply"] is None and "unreachable" in c["error"] for c in calls)


def test_an_unreachable_llm_is_not_asked_the_rest_of_a_batch(recorder):
    questions = ["Who wrote Hamlet?", "Who painted the Mona Lisa?", "When did Shakespeare die?"]
    with forwarding_llm_calls():
        decisions = SKRPromptGate(LlamaIndexChatModel(DownLLM())).decide_batch(questions)
    assert all(d.is_fallback and d.retrieve for d in decisions)
    assert len([e for e in recorder.events if isinstance(e, GateLLMCallEvent)]) == 1
