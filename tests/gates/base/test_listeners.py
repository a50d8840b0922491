"""Decision listeners on real gates: every decision and every LLM call reaches them,
whether attached to a gate or to a block of code, a failing listener changes nothing,
and a block's listeners see only the decisions of their own run, in threads and tasks."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter

import pytest

from adaptive_gates import (
    DecisionListener,
    LLMCallEvent,
    SKRKnnGate,
    SKRPromptGate,
    VerbalizedGate,
    listening,
)
from adaptive_gates.models import LocalChatModel, OpenAIChatModel
from support.openai_server import Fault


class Recorder(DecisionListener):
    """Keeps what it is told."""

    def __init__(self) -> None:
        self.decisions: list = []
        self.calls: list[LLMCallEvent] = []

    def on_decision(self, decision) -> None:
        self.decisions.append(decision)

    def on_llm_call(self, event: LLMCallEvent) -> None:
        self.calls.append(event)

    def questions(self) -> list[str]:
        return [d.question for d in self.decisions]


class Failing:
    """A listener that raises whatever it is told."""

    def on_decision(self, decision) -> None:
        raise RuntimeError("listener down")

    def on_llm_call(self, event) -> None:
        raise RuntimeError("listener down")


class OnlyDecisions:
    """A listener without ``on_llm_call``."""

    def on_decision(self, decision) -> None:
        pass


@pytest.fixture(scope="module")
def questions(qa_records) -> list[str]:
    """Six real NQ-open dev questions."""
    return [r.question for r in qa_records[:6]]


@pytest.fixture(scope="module")
def knn(outcome_records, embedder) -> SKRKnnGate:
    """A kNN gate on 60 real outcome records."""
    return SKRKnnGate(embedder, k=5).fit_outcomes(outcome_records[:60])


def remote(server, **options) -> OpenAIChatModel:
    return OpenAIChatModel(server.model_id, base_url=server.base_url, **options)


def check_calls_match(recorder: Recorder, gate_name: str, model_id: str) -> None:
    """The calls seen are those the decisions' evidence counts, under the gate's name."""
    assert len(recorder.calls) == sum(d.llm_calls for d in recorder.decisions)
    for event in recorder.calls:
        assert (event.gate, event.model_id) == (gate_name, model_id)
        assert (event.reply is None) != (event.error is None) and event.latency_ms >= 0


def test_a_gates_listener_sees_every_decision_sync_and_async(knn, questions) -> None:
    recorder, quiet = Recorder(), Recorder()
    knn.add_listener(recorder)
    try:
        batch = knn.decide_batch([*questions[:3], "   "])
        one = knn.decide(questions[3])
        awaited = asyncio.run(knn.adecide_batch(questions[4:6]))
        knn.score(questions[:2])  # scores are not decisions
    finally:
        knn.remove_listener(recorder)
    knn.decide(questions[0])
    assert recorder.decisions == [*batch, one, *awaited]
    assert recorder.decisions[3].is_fallback and not recorder.calls  # the kNN gate asks no LLM
    knn.add_listener(quiet)
    knn.remove_listener(quiet)
    with pytest.raises(ValueError, match="not a listener"):
        knn.remove_listener(quiet)


def test_what_is_not_a_listener_is_refused(knn) -> None:
    with pytest.raises(TypeError, match="on_decision or on_llm_call"):
        knn.add_listener(print)
    with pytest.raises(TypeError, match="on_decision or on_llm_call"), listening(object()):
        pass


def test_every_llm_call_of_the_embedded_verbalized_gate_is_seen(questions) -> None:
    gate = VerbalizedGate(LocalChatModel(), max_tokens=12)
    recorder = Recorder()
    gate.add_listener(recorder)
    decisions = gate.decide_batch(questions[:3])
    assert recorder.decisions == decisions
    check_calls_match(recorder, "verbalized", gate.chat.model_id)
    first = [e for e in recorder.calls if e.purpose == "answer+certainty"]
    assert [e.reply for e in first] == [d.details["reply"] for d in decisions]
    assert all(q in e.messages[-1]["content"] for q, e in zip(questions, first))
    judged = [d for d in decisions if "judgement_reply" in d.details]
    assert [e.reply for e in recorder.calls if e.purpose == "judgement"] == [
        d.details["judgement_reply"] for d in judged
    ]
    assert set(Counter(e.purpose for e in recorder.calls)) <= {"answer+certainty", "judgement"}


@pytest.mark.parametrize("awaited", [False, True])
def test_a_scoped_listener_sees_the_calls_made_in_worker_threads_and_tasks(
    openai_server, openai_base_url, questions, awaited
) -> None:
    gate = VerbalizedGate(remote(openai_server), strategy="challenge", max_tokens=12, max_workers=2)
    recorder = Recorder()
    with listening(recorder):
        decisions = asyncio.run(gate.adecide_batch(questions[:3])) if awaited else gate.decide_batch(questions[:3])
    assert recorder.decisions == decisions
    check_calls_match(recorder, "verbalized", openai_server.model_id)
    assert len(recorder.calls) == openai_server.requests
    purposes = Counter(e.purpose for e in recorder.calls)
    assert purposes["answer"] == purposes["challenge"] == 3
    assert purposes["judgement"] == sum("judgement_reply" in d.details for d in decisions)
    for event in recorder.calls:
        if event.purpose == "challenge":
            assert event.messages[-2]["role"] == "assistant" and len(event.messages) == 3


def test_a_failed_request_is_seen_with_its_error(openai_server, openai_base_url, questions) -> None:
    gate = SKRPromptGate(remote(openai_server, max_retries=0), max_tokens=2)
    recorder = Recorder()
    openai_server.set_fault(Fault.ERROR_500)
    with listening(recorder):
        decision = gate.decide(questions[0])
    [event] = recorder.calls
    assert decision.is_fallback and recorder.decisions == [decision]
    assert (event.gate, event.purpose, event.reply) == ("skr-prompt", "skr-prompt", None)
    assert event.error.startswith("BackendError") and "HTTP 500" in event.error


def test_a_failing_listener_changes_no_decision(knn, questions, caplog) -> None:
    gate = SKRPromptGate(LocalChatModel(), max_tokens=4)
    expected = {name: g.decide_batch(questions[:2]) for name, g in (("knn", knn), ("prompt", gate))}
    recorder, failing = Recorder(), Failing()
    for g in (knn, gate):
        g.add_listener(failing)
    try:
        with (
            caplog.at_level(logging.ERROR, logger="adaptive_gates.gates.base.listeners"),
            listening(OnlyDecisions(), recorder),
        ):
            got = {"knn": knn.decide_batch(questions[:2]), "prompt": asyncio.run(gate.adecide_batch(questions[:2]))}
    finally:
        for g in (knn, gate):
            g.remove_listener(failing)
    for name in expected:
        assert [(d.retrieve, d.score, d.details, d.error) for d in got[name]] == [
            (d.retrieve, d.score, d.details, d.error) for d in expected[name]
        ]
    # The listeners after the failing one are still told everything.
    assert recorder.decisions == [*got["knn"], *got["prompt"]] and len(recorder.calls) == 2
    assert [e.purpose for e in recorder.calls] == ["skr-prompt", "skr-prompt"]
    failures = [r for r in caplog.records if "listener down" in str(r.exc_info[1])]
    assert len(failures) == 4 + 2  # four decisions, two LLM calls


def test_scoped_listeners_of_concurrent_threads_see_only_their_own_run(knn, questions) -> None:
    recorders = [Recorder(), Recorder()]
    both_listening = threading.Barrier(2)

    def run(recorder: Recorder, batch: list[str]) -> None:
        with listening(recorder):
            both_listening.wait()
            for question in batch:
                knn.decide(question)

    threads = [threading.Thread(target=run, args=(r, questions[i::2])) for i, r in enumerate(recorders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.questions() for r in recorders] == [questions[0::2], questions[1::2]]


def test_scoped_listeners_of_concurrent_tasks_see_only_their_own_run(openai_server, openai_base_url, questions) -> None:
    gate = SKRPromptGate(remote(openai_server), max_tokens=2, max_workers=2)
    recorders = [Recorder(), Recorder()]
    runs = [questions[0:3], questions[3:6]]

    async def run(recorder: Recorder, batch: list[str]) -> None:
        with listening(recorder):
            await asyncio.sleep(0)  # both blocks are open before either decides
            await gate.adecide_batch(batch)

    async def both() -> None:
        await asyncio.gather(*(run(r, b) for r, b in zip(recorders, runs)))

    asyncio.run(both())
    for recorder, batch in zip(recorders, runs):
        assert recorder.questions() == batch
        asked = sorted(e.messages[-1]["content"] for e in recorder.calls)
        assert len(asked) == 3 and all(any(q in a for a in asked) for q in batch)
