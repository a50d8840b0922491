"""AdaptedEmbedder: a framework's encoder behind the core's Embedder protocol."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates import BackendError, SKRKnnGate
from adaptive_gates.models import AdaptedEmbedder, Embedder


def test_it_carries_a_real_encoder_into_a_gate(embedder):
    calls: list[int] = []

    def encode(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        return embedder.embed(texts).tolist()

    adapted = AdaptedEmbedder(encode, "framework:minilm")
    assert isinstance(adapted, Embedder)
    assert adapted.dimension == embedder.dimension and calls == [1]  # one probe, once
    questions = ["Who wrote Hamlet?", "What was the population of Tuvalu in 2021?"]
    np.testing.assert_allclose(adapted.embed(questions), embedder.embed(questions), atol=1e-6)
    gate = SKRKnnGate(adapted, k=1).fit(questions, [0, 1])
    assert [d.retrieve for d in gate.decide_batch(questions)] == [False, True]


def test_encoder_failures_are_backend_errors():
    def broken(texts: list[str]) -> list[list[float]]:
        raise ConnectionError("encoder down")

    with pytest.raises(BackendError, match="encoder down"):
        AdaptedEmbedder(broken, "broken", dimension=3).embed(["a question"])


@pytest.mark.parametrize(
    "reply, problem",
    [([[0.1, 0.2]], "2-d vectors, expected 3-d"), ([[0.1, 0.2, float("nan")]], "NaN"), ([], "shape")],
)
def test_malformed_vectors_are_refused(reply, problem):
    adapted = AdaptedEmbedder(lambda texts: reply, "odd", dimension=3)
    with pytest.raises(BackendError, match=problem):
        adapted.embed(["a question"])


def test_bad_arguments_are_refused():
    adapted = AdaptedEmbedder(lambda texts: [[0.0]] * len(texts), "one-d", dimension=1)
    with pytest.raises(TypeError, match="not a single string"):
        adapted.embed("a question")
    assert adapted.embed([]).shape == (0, 1)
    with pytest.raises(ValueError, match="positive int"):
        AdaptedEmbedder(lambda texts: texts, "x", dimension=0)
