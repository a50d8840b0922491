"""CachedEmbedder: a memo in front of the embedded MiniLM (each test its own memo)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from adaptive_gates.errors import BackendError
from adaptive_gates.models.embedding.cached import CachedEmbedder

QUESTIONS = ["who wrote hamlet", "capital of australia", "how tall is everest"]


class CountingEmbedder:
    """An embedder of its own that says how many texts it was asked: one-hot by length."""

    model_id = "counting"
    dimension = 4

    def __init__(self, rows: int | None = None) -> None:
        self.seen: list[str] = []
        self.rows = rows  # rows to return, when not one per text

    def embed(self, texts):
        self.seen.extend(texts)
        n = len(texts) if self.rows is None else self.rows
        return np.eye(4, dtype=np.float32)[[len(t) % 4 for t in texts][:n] + [0] * max(0, n - len(texts))]


def test_vectors_are_the_inner_embedders(embedder):
    cached = CachedEmbedder(embedder)
    np.testing.assert_allclose(cached.embed(QUESTIONS), embedder.embed(QUESTIONS), atol=1e-6)
    assert len(cached) == 3
    assert all(q in cached for q in QUESTIONS)
    assert "never asked" not in cached


def test_identity_is_the_inner_embedders(embedder):
    cached = CachedEmbedder(embedder)
    assert cached.model_id == embedder.model_id
    assert cached.dimension == embedder.dimension == 384
    assert cached.settings() == embedder.settings()
    assert CachedEmbedder(CountingEmbedder()).settings() is None
    assert repr(cached).startswith("CachedEmbedder(") and "memoise=True" in repr(cached)


def test_each_text_goes_to_the_model_once():
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    first = cached.embed(["a", "bb", "a"])  # a repeat within a call is embedded once
    assert inner.seen == ["a", "bb"]
    second = cached.embed(["bb", "ccc", "a"])
    assert inner.seen == ["a", "bb", "ccc"]
    np.testing.assert_array_equal(second[[0, 2]], first[[1, 0]])


def test_stored_vectors_are_served_without_the_model(embedder):
    cached = CachedEmbedder(embedder)
    planted = np.full((1, 384), 0.5, dtype=np.float32)
    cached.store(["who wrote hamlet"], planted)
    out = cached.embed(["who wrote hamlet", "capital of australia"])
    np.testing.assert_array_equal(out[0], planted[0])  # the table's row, not the model's
    np.testing.assert_allclose(out[1], embedder.embed(["capital of australia"])[0], atol=1e-6)


def test_without_memoising_only_stored_vectors_are_kept():
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, memoise=False)
    cached.store(["kept"], np.ones((1, 4)))
    cached.embed(["kept", "other"])
    cached.embed(["other"])
    assert inner.seen == ["other", "other"]
    assert len(cached) == 1 and "other" not in cached


def test_the_least_recently_used_text_is_dropped_first():
    cached = CachedEmbedder(CountingEmbedder(), max_entries=2)
    cached.embed(["a", "bb"])
    cached.embed(["a"])  # a is used again: bb is now the oldest
    cached.embed(["ccc"])
    assert "a" in cached and "ccc" in cached and "bb" not in cached
    cached.store(["dddd", "eeeee"], np.zeros((2, 4)))
    assert len(cached) == 2 and "a" not in cached


def test_a_single_string_is_refused_not_embedded_by_character():
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    with pytest.raises(TypeError, match="not a single string"):
        cached.embed("who wrote hamlet")
    assert inner.seen == [] and len(cached) == 0


def test_nothing_to_embed_gives_no_rows(embedder):
    out = CachedEmbedder(embedder).embed([])
    assert out.shape == (0, 384) and out.dtype == np.float32


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_max_entries_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="max_entries"):
        CachedEmbedder(CountingEmbedder(), max_entries=bad)


def test_store_refuses_rows_that_do_not_match_the_texts():
    cached = CachedEmbedder(CountingEmbedder())
    with pytest.raises(ValueError, match="expected 2 rows"):
        cached.store(["a", "b"], np.zeros((3, 4)))
    with pytest.raises(ValueError, match="expected 1 rows"):
        cached.store(["a"], np.zeros(4))
    assert len(cached) == 0


def test_a_malformed_inner_reply_is_a_backend_error_and_not_kept():
    cached = CachedEmbedder(CountingEmbedder(rows=1))
    with pytest.raises(BackendError, match="counting"):
        cached.embed(["a", "bb"])
    assert len(cached) == 0


def test_threads_sharing_the_memo_get_the_same_vectors(embedder):
    cached = CachedEmbedder(embedder)
    expected = embedder.embed(QUESTIONS)
    results, errors = [], []

    def work():
        try:
            results.append(cached.embed(QUESTIONS[::-1])[::-1])
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for out in results:
        np.testing.assert_allclose(out, expected, atol=1e-6)
    assert len(cached) == 3
