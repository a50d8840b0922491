"""The input and output rules of the built-in sentence embedders."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.errors import BackendError
from adaptive_gates.models.embedding.inputs import (
    DEFAULT_BATCH_SIZE,
    PROGRESS_MIN_TEXTS,
    checked_embeddings,
    shows_progress,
    texts_to_embed,
)


def test_texts_to_embed_lists_any_sequence_of_strings():
    assert texts_to_embed(("a", "b")) == ["a", "b"]
    assert texts_to_embed(t for t in ["x", ""]) == ["x", ""]
    assert texts_to_embed([]) == []


def test_texts_to_embed_refuses_a_single_string():
    with pytest.raises(TypeError, match="not a single string"):
        texts_to_embed("what is the capital of France?")


@pytest.mark.parametrize("bad", [None, 3, b"bytes", ["nested"]])
def test_texts_to_embed_names_the_item_that_is_no_string(bad):
    with pytest.raises(TypeError, match=f"text 1 must be a str, got {type(bad).__name__}"):
        texts_to_embed(["fine", bad])


def test_progress_shows_only_above_the_threshold():
    assert not shows_progress(0)
    assert not shows_progress(PROGRESS_MIN_TEXTS)
    assert shows_progress(PROGRESS_MIN_TEXTS + 1)
    assert DEFAULT_BATCH_SIZE >= 1


def test_checked_embeddings_gives_float32_of_the_expected_shape():
    vectors = checked_embeddings(np.ones((2, 3), dtype=np.float64), 2, 3, "m")
    assert vectors.dtype == np.float32
    assert vectors.shape == (2, 3)
    assert checked_embeddings([[0.5, 0.25]], 1, 2, "m").tolist() == [[0.5, 0.25]]


@pytest.mark.parametrize("shape", [(3, 4), (2, 5), (8,), (2, 4, 1)])
def test_checked_embeddings_refuses_another_shape(shape):
    with pytest.raises(BackendError, match=r"my-model returned shape"):
        checked_embeddings(np.zeros(shape), 2, 4, "my-model")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_checked_embeddings_refuses_non_finite_values(bad):
    vectors = np.zeros((2, 4))
    vectors[1, 2] = bad
    with pytest.raises(BackendError, match="NaN or inf"):
        checked_embeddings(vectors, 2, 4, "my-model")
