"""The memo in front of a retriever: each (query, k) searched once."""

from __future__ import annotations

import threading

import pytest

from adaptive_gates.records.data import load_corpus
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.retrieval.cached import CachedRetriever


class RecordingBM25(BM25Retriever):
    """The real BM25 retriever, noting each batch it is asked to search."""

    batches: list[list[str]]

    def search_batch(self, queries, k=3, **kwargs):
        self.batches.append(list(queries))
        return super().search_batch(queries, k, **kwargs)


@pytest.fixture(scope="module")
def passages(corpus_path):
    return load_corpus(corpus_path)[:40]


@pytest.fixture
def bm25(passages):
    retriever = RecordingBM25.from_records(passages)
    retriever.batches = []
    return retriever


def test_hits_are_the_wrapped_retrievers(bm25, passages):
    cached = CachedRetriever(bm25)
    assert cached.wrapped is bm25
    queries = [p.title for p in passages[:5]]
    assert cached.search_batch(queries, k=3) == bm25.search_batch(queries, k=3)
    assert cached.search(queries[0], k=2) == bm25.search(queries[0], k=2)


def test_a_query_seen_again_is_not_searched_again(bm25, passages):
    cached = CachedRetriever(bm25)
    first = cached.search(passages[0].title)
    again = cached.search(passages[0].title)
    assert again == first
    assert again[0] is first[0]  # the same hits, handed out again
    assert bm25.batches == [[passages[0].title]]


def test_only_new_queries_are_searched_each_once(bm25, passages):
    a, b, c = (p.title for p in passages[:3])
    cached = CachedRetriever(bm25)
    cached.search(a)
    hits = cached.search_batch([b, a, c, b], k=3)
    assert bm25.batches == [[a], [b, c]]
    assert hits[0] == hits[3]
    assert [h[0].id for h in hits[:3]] == [passages[1].id, passages[0].id, passages[2].id]


def test_k_is_part_of_the_key(bm25):
    query = "which company makes the fuel used in cars and engines"
    cached = CachedRetriever(bm25)
    one, four = cached.search(query, k=1), cached.search(query, k=4)
    assert len(one) == 1
    assert len(four) == 4
    assert one == four[:1]
    assert bm25.batches == [[query], [query]]


def test_the_caller_cannot_change_the_memo(bm25, passages):
    cached = CachedRetriever(bm25)
    cached.search(passages[0].title).clear()
    assert len(cached.search(passages[0].title)) == 3


def test_an_error_is_not_remembered(bm25, passages):
    cached = CachedRetriever(bm25)
    with pytest.raises(ValueError, match="k must be a positive int"):
        cached.search(passages[0].title, k=0)
    assert cached.search(passages[0].title, k=3)


def test_concurrent_searches_agree(bm25, passages):
    cached = CachedRetriever(bm25)
    queries = [p.title for p in passages[:20]]
    expected = bm25.search_batch(queries)
    results, errors = [], []

    def run():
        try:
            results.append(cached.search_batch(queries))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [expected] * 4
