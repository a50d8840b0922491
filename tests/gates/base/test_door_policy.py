"""The one policy by which every framework door asks a gate for a decision: a gate that
raises gives its recorded fallback, a gate that cannot decide at all raises."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from adaptive_gates import NotFittedError, SKRKnnGate, VerbalizedGate
from adaptive_gates.extend import (
    RAISED_BY_DOORS,
    VECTOR_QUESTION,
    adecide_batch_or_fallback,
    adecide_or_fallback,
    decide_batch_or_fallback,
    decide_or_fallback,
)
from adaptive_gates.gates.base.gate import Gate
from adaptive_gates.models import OpenAIChatModel

QUESTIONS = ["Who wrote Hamlet?", "What is the capital of France?", "Population of Tuvalu in 2021?"]
LABELS = [0, 0, 1]
ASKED = "Who painted the Mona Lisa?"


class TieBreakingGate(SKRKnnGate):
    """A custom gate whose own rule has a bug: deciding raises past the gate's guards."""

    name = "tie-breaking-knn"

    def retrieves(self, scores: np.ndarray, threshold: float | None = None) -> np.ndarray:
        return np.asarray(scores) > self.tie_threshold  # never set: the bug


# The class registered itself when defined: a test's gate is no gate of the package.
del Gate._registry[TieBreakingGate.name]


class Heard:
    def __init__(self) -> None:
        self.decisions: list = []

    def on_decision(self, decision) -> None:
        self.decisions.append(decision)


@pytest.fixture(scope="module")
def knn(embedder) -> SKRKnnGate:
    return SKRKnnGate(embedder, k=1).fit(QUESTIONS, LABELS)


def test_a_working_gate_decides_as_it_would_alone(knn, embedder):
    alone = knn.decide(ASKED)
    assert decide_or_fallback(knn, ASKED).retrieve == alone.retrieve
    assert asyncio.run(adecide_or_fallback(knn, ASKED)).score == pytest.approx(alone.score)
    assert [d.score for d in decide_batch_or_fallback(knn, [ASKED, QUESTIONS[2]])] == pytest.approx(
        [d.score for d in knn.decide_batch([ASKED, QUESTIONS[2]])]
    )
    by_vector = decide_or_fallback(knn, VECTOR_QUESTION, vector=embedder.embed([ASKED])[0])
    assert by_vector.question == VECTOR_QUESTION and by_vector.score == pytest.approx(alone.score)


def test_an_unfitted_gate_raises_the_same_error_on_every_path(embedder):
    unfitted = SKRKnnGate(embedder, k=1)
    calls = [
        lambda: decide_or_fallback(unfitted, ASKED),
        lambda: asyncio.run(adecide_or_fallback(unfitted, ASKED)),
        lambda: decide_batch_or_fallback(unfitted, [ASKED]),
        lambda: asyncio.run(adecide_batch_or_fallback(unfitted, [ASKED])),
        lambda: decide_or_fallback(unfitted, VECTOR_QUESTION, vector=embedder.embed([ASKED])[0]),
    ]
    for call in calls:
        with pytest.raises(NotFittedError, match="SKRKnnGate is not fitted: call fit"):
            call()
    assert NotFittedError in RAISED_BY_DOORS


def test_a_gate_that_raises_gives_its_recorded_fallback_heard_by_its_listeners(embedder, caplog):
    buggy = TieBreakingGate(embedder, k=1).fit(QUESTIONS, LABELS)
    heard = Heard()
    buggy.add_listener(heard)
    with caplog.at_level("ERROR"):
        one = decide_or_fallback(buggy, ASKED)
    assert one.is_fallback and one.retrieve is True and one.question == ASKED
    assert one.error.startswith("the gate raised AttributeError:") and "tie_threshold" in one.error
    assert "tie-breaking-knn: the gate raised AttributeError" in caplog.text
    awaited = asyncio.run(adecide_batch_or_fallback(buggy, [ASKED, QUESTIONS[0]]))
    assert [(d.question, d.error) for d in awaited] == [(ASKED, one.error), (QUESTIONS[0], one.error)]
    assert heard.decisions == [one, *awaited]
    stays = TieBreakingGate(embedder, k=1, fallback_retrieve=False).fit(QUESTIONS, LABELS)
    assert decide_batch_or_fallback(stays, [ASKED])[0].retrieve is False


@pytest.fixture
def down_chat() -> OpenAIChatModel:
    """A real OpenAI client for a port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return OpenAIChatModel("down", base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)


def test_a_failing_backend_is_the_gates_own_fallback(down_chat):
    down = VerbalizedGate(down_chat)
    for decision in (decide_or_fallback(down, ASKED), asyncio.run(adecide_or_fallback(down, ASKED))):
        assert decision.is_fallback and decision.retrieve and "BackendUnavailableError" in decision.error
    assert not decision.error.startswith("the gate raised")  # the gate's own fallback, not the door's


def test_a_vector_for_a_gate_that_reads_text_is_refused(embedder, down_chat):
    with pytest.raises(TypeError, match="verbalized gate judges the question's text"):
        decide_or_fallback(VerbalizedGate(down_chat), ASKED, vector=embedder.embed([ASKED])[0])
