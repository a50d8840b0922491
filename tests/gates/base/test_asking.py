"""The awaited decision path of the chat-backed gates: against the real OpenAI-compatible
test server (``support/openai_server.py``) and the embedded SmolLM2, the same decisions as the
blocking path, requests awaited rather than held in threads, ``max_workers`` requests
in flight at most, the deadline and the stop after an unavailable backend kept."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Sequence

import pytest

from adaptive_gates import SKRPromptGate, VerbalizedGate, listening
from adaptive_gates.errors import BackendUnavailableError
from adaptive_gates.models import ChatModel, ChatReply, LocalChatModel, OpenAIChatModel, with_achat
from gates.test_skr_prompt import QUESTION, ScriptedChat
from support.openai_server import ChatCompletionsServer, Fault

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def questions(qa_records) -> list[str]:
    """Four real NQ-open dev questions."""
    return [r.question for r in qa_records[:4]]


def remote(server: ChatCompletionsServer, **options: object) -> OpenAIChatModel:
    return OpenAIChatModel(server.model_id, base_url=server.base_url, **options)


class InFlight:
    """A chat model passed through unchanged, counting its requests in flight (blocking
    or awaited) and the most there ever were at once."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.model_id = model.model_id
        self.now = self.most = 0
        self._lock = threading.Lock()

    def _enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def _leave(self) -> None:
        with self._lock:
            self.now -= 1

    def chat(self, messages: Sequence[dict[str, str]], **options: object) -> ChatReply:
        self._enter()
        try:
            return self.model.chat(messages, **options)
        finally:
            self._leave()

    async def achat(self, messages: Sequence[dict[str, str]], **options: object) -> ChatReply:
        self._enter()
        try:
            return await self.model.achat(messages, **options)
        finally:
            self._leave()


class Recorder:
    """A listener keeping the LLM calls it is told of."""

    def __init__(self) -> None:
        self.calls: list = []

    def on_llm_call(self, event) -> None:
        self.calls.append(event)


def same_decisions(left, right) -> None:
    assert [(d.retrieve, d.score, d.details, d.draft_answer, d.error) for d in left] == [
        (d.retrieve, d.score, d.details, d.draft_answer, d.error) for d in right
    ]


def test_both_chat_models_speak_the_async_protocol(openai_server, openai_base_url) -> None:
    local = openai_server.chat_model
    assert isinstance(local, ChatModel) and isinstance(remote(openai_server), ChatModel)
    assert with_achat(local) is local
    assert asyncio.run(local.achat(FRANCE, max_tokens=6)) == local.chat(FRANCE, max_tokens=6)


def test_achat_of_a_hung_server_is_unavailable_after_the_same_bounded_retries(openai_server, openai_base_url) -> None:
    model = remote(openai_server, timeout=0.5, max_retries=1)
    openai_server.set_fault(Fault.HANG)
    with pytest.raises(BackendUnavailableError, match="timed out") as caught:
        asyncio.run(model.achat(FRANCE, max_tokens=2))
    assert openai_server.model_id in str(caught.value) and "max_retries 1" in str(caught.value)
    assert openai_server.requests == 2


@pytest.mark.parametrize("strategy", ["vanilla", "challenge"])
def test_adecide_batch_gives_the_decisions_of_decide_batch(openai_server, openai_base_url, questions, strategy) -> None:
    # Two questions on two workers: each round's requests in flight together, every
    # round compared; test_requests_in_flight_are_bounded_by_max_workers shows the bound.
    # Four tokens a challenge or judgement reply: the rounds are what is compared, not their length.
    gate = VerbalizedGate(remote(openai_server), strategy=strategy, max_tokens=6, follow_up_tokens=4, max_workers=2)
    blocking = gate.decide_batch(questions[:2])
    sent = openai_server.requests
    awaited = asyncio.run(gate.adecide_batch(questions[:2]))
    same_decisions(awaited, blocking)
    # Every round was asked again, each request once.
    assert openai_server.requests == 2 * sent == 2 * sum(d.llm_calls for d in blocking)


def test_skr_prompt_and_the_embedded_model_give_the_same_decisions_awaited(questions) -> None:
    verbalized = VerbalizedGate(LocalChatModel(), max_tokens=6, follow_up_tokens=4)
    for gate in (SKRPromptGate(LocalChatModel(), max_tokens=4), verbalized):
        same_decisions(asyncio.run(gate.adecide_batch(questions[:2])), gate.decide_batch(questions[:2]))


def test_rounds_run_the_same_for_a_model_with_only_chat() -> None:
    def script() -> ScriptedChat:
        return ScriptedChat(
            {"ask": ChatReply("Paris"), "challenge": ChatReply("Hmm."), "judgement": ChatReply("Certain.")}
        )

    blocking, awaited = script(), script()
    decision = VerbalizedGate(blocking, strategy="challenge").decide(QUESTION)
    same_decisions([asyncio.run(VerbalizedGate(awaited, strategy="challenge").adecide(QUESTION))], [decision])
    assert awaited.calls == blocking.calls and len(blocking.calls) == 3  # answer, challenge, judgement
    assert decision.details["certainty_from"] == "judgement" and decision.draft_answer == "Paris"


@pytest.mark.parametrize("max_workers", [1, 3])
def test_requests_in_flight_are_bounded_by_max_workers(openai_server, openai_base_url, questions, max_workers) -> None:
    model = InFlight(remote(openai_server))
    gate = SKRPromptGate(model, max_tokens=2, max_workers=max_workers)
    decisions = asyncio.run(gate.adecide_batch(questions))
    assert not any(d.is_fallback for d in decisions)
    assert model.most == max_workers and model.now == 0
    assert openai_server.requests == len(questions)


def test_decisions_await_the_server_without_holding_a_thread_or_the_loop(openai_server, openai_base_url, questions):
    """Three decisions on a loop with a single worker thread: their requests, held back
    by the server, are all in flight at once (a decision held in a thread would leave
    one), and a ticker keeps ticking while they wait."""
    model = InFlight(remote(openai_server))
    gate = SKRPromptGate(model, max_tokens=2)
    openai_server.set_fault(Fault.SLOW)
    ticks = 0

    async def run() -> list:
        nonlocal ticks
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        deciding = asyncio.gather(*(gate.adecide(q) for q in questions[:3]))
        while not deciding.done():
            await asyncio.sleep(0.01)
            ticks += 1
        return await deciding

    decisions = asyncio.run(run())
    assert not any(d.is_fallback for d in decisions)
    assert model.most == 3 and openai_server.requests == 3
    assert ticks > 1


def test_a_hung_server_gives_fallback_decisions_at_the_deadline(openai_server, openai_base_url, questions) -> None:
    # The client would wait 30 s per request; the gate's one-second deadline ends the batch.
    gate = VerbalizedGate(remote(openai_server, timeout=30.0, max_retries=0), max_workers=2, deadline=1.0)
    openai_server.set_fault(Fault.HANG)
    decisions = asyncio.run(gate.adecide_batch(questions[:3]))
    assert all(d.is_fallback and d.retrieve for d in decisions)
    assert all("gave no reply before the deadline" in d.error for d in decisions)
    assert openai_server.requests == 2  # the third was never sent


def test_no_request_follows_one_that_found_the_server_unavailable(openai_server, openai_base_url, questions) -> None:
    gate = SKRPromptGate(remote(openai_server, timeout=0.5, max_retries=0), max_tokens=2, deadline=None)
    openai_server.set_fault(Fault.HANG)
    decisions = asyncio.run(gate.adecide_batch(questions[:3]))
    assert "timed out" in decisions[0].error
    assert all("not asked after an earlier request found it unavailable" in d.error for d in decisions[1:])
    assert openai_server.requests == 1


def test_a_cancelled_decision_cancels_its_requests(openai_server, openai_base_url, questions) -> None:
    gate = SKRPromptGate(remote(openai_server, timeout=5.0, max_retries=0), max_tokens=2, deadline=None)
    recorder = Recorder()
    openai_server.set_fault(Fault.HANG)

    async def run() -> None:
        with listening(recorder), pytest.raises(TimeoutError):
            await asyncio.wait_for(gate.adecide(questions[0]), 0.5)
        # Whatever the decision started has ended by now, one way or the other.
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))

    asyncio.run(run())
    [event] = recorder.calls
    assert event.error.startswith("CancelledError")  # not left to run into the client's timeout
