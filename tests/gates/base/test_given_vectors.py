"""Gates that score nothing of a question but its encoder vector (SKR-kNN, SKR-cls,
Thrust) decide from a vector the caller already holds exactly as from the question, and
refuse a vector of another length with their fallback decision."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from adaptive_gates import SKRClassifierGate, SKRIclGate, SKRKnnGate, ThrustGate
from adaptive_gates.extend import VECTOR_QUESTION, DecidesFromVectors

QUESTIONS = [
    "Who wrote Hamlet?",
    "What is the capital of France?",
    "Population of Tuvalu in 2021?",
    "Who won yesterday?",
]
LABELS = [0, 0, 1, 1]
ASKED = "Who painted the Mona Lisa?"


@pytest.fixture(scope="module")
def gates(embedder) -> list[DecidesFromVectors]:
    return [
        SKRKnnGate(embedder, k=2).fit(QUESTIONS, LABELS),
        SKRClassifierGate(embedder).fit(QUESTIONS, LABELS),
        ThrustGate(representer=embedder).fit(QUESTIONS, ["known", "known", "unknown", "unknown"]),
    ]


def test_a_given_vector_decides_as_the_question_does(gates, embedder):
    vector = embedder.embed([ASKED])[0]
    for gate in gates:
        by_text, by_vector = gate.decide(ASKED), gate.decide_vector(vector)
        assert by_vector.question == VECTOR_QUESTION and by_vector.error is None
        assert by_vector.score == pytest.approx(by_text.score) and by_vector.retrieve == by_text.retrieve
        assert asyncio.run(gate.adecide_vector(list(vector), ASKED)).score == pytest.approx(by_text.score)


def test_a_vector_of_another_length_gets_the_fallback(gates):
    for gate in gates:
        decision = gate.decide_vector(np.ones(7))
        assert decision.is_fallback and "7 values" in decision.error and "encoder gives 384" in decision.error
        assert gate.decide_vector([float("nan")] * 384).error == "invalid query embedding: it holds NaN or inf"


def test_a_gate_that_also_reads_the_text_takes_no_vector():
    assert not issubclass(SKRIclGate, DecidesFromVectors)  # it asks its LLM the question itself
