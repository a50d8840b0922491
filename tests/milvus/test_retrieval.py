"""Dense retrieval over a corpus kept in Milvus, against a real Milvus Lite server and MiniLM."""

from __future__ import annotations

import logging
import uuid

import numpy as np
import pytest

from adaptive_gates.errors import CollectionMismatchError, InvalidQuestionError
from adaptive_gates.milvus.client import MilvusCollection, milvus_client
from adaptive_gates.milvus.retrieval import _FIELDS, MilvusRetriever
from adaptive_gates.records.data import CorpusRecord, load_corpus, write_jsonl
from adaptive_gates.retrieval import DenseRetriever, Retriever

#: The question conftest's ``wiki_anchor`` writes for the first packaged passage.
ETHANOL_QUESTION = "How much energy does it take to make ethanol compared to what it gives?"


@pytest.fixture
def name() -> str:
    """A collection name no other test uses."""
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture(scope="module")
def passages(corpus_path):
    return load_corpus(corpus_path)[:12]


def test_a_bad_corpus_is_refused_before_the_database_is_asked(passages, cached_embedder):
    nowhere = "http://127.0.0.1:9"  # no server: each refusal comes first
    with pytest.raises(ValueError, match="cannot index an empty corpus"):
        MilvusRetriever.from_records([], cached_embedder, nowhere, "c")
    with pytest.raises(ValueError, match="batch_size must be positive"):
        MilvusRetriever.from_records(passages, cached_embedder, nowhere, "c", batch_size=0)
    with pytest.raises(ValueError, match="the corpus repeats record ids: 3 records, 2 distinct ids"):
        MilvusRetriever.from_records([*passages[:2], passages[0]], cached_embedder, nowhere, "c")
    huge = CorpusRecord("big", "", "x" * 70_000)
    with pytest.raises(ValueError, match="corpus record 'big': field 'text' is 70000 bytes"):
        MilvusRetriever.from_records([huge], cached_embedder, nowhere, "c")


@pytest.mark.milvus
def test_it_searches_as_the_dense_retriever_does(milvus_uri, name, passages, cached_embedder):
    retriever = MilvusRetriever.from_records(passages, cached_embedder, milvus_uri, name, batch_size=5, progress=False)
    assert isinstance(retriever, Retriever)
    assert (retriever.collection, len(retriever)) == (name, 12)
    dense = DenseRetriever.from_records(passages, cached_embedder)
    queries = [ETHANOL_QUESTION, passages[4].title, passages[9].title]
    for hits, expected in zip(retriever.search_batch(queries, k=4), dense.search_batch(queries, k=4)):
        assert [h.id for h in hits] == [h.id for h in expected]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in expected], atol=1e-4)
        assert [(h.title, h.text) for h in hits] == [(h.title, h.text) for h in expected]
    assert retriever.search(ETHANOL_QUESTION, k=1)[0].id == passages[0].id
    assert len(retriever.search(ETHANOL_QUESTION, k=50)) == 12  # clipped to the corpus
    assert retriever.search_batch([], k=3) == []
    with pytest.raises(InvalidQuestionError):
        retriever.search("  ")
    with pytest.raises(ValueError, match="k must be a positive int"):
        retriever.search(ETHANOL_QUESTION, k=0)


@pytest.mark.milvus
def test_an_indexed_collection_is_reused_and_a_cut_short_one_completed(
    milvus_uri, name, passages, cached_embedder, caplog
):
    MilvusRetriever.from_records(passages[:5], cached_embedder, milvus_uri, name, progress=False)
    completed = MilvusRetriever.from_records(passages, cached_embedder, milvus_uri, name, progress=False)
    assert len(completed) == 12
    with caplog.at_level(logging.INFO, logger="adaptive_gates.milvus.retrieval"):
        reused = MilvusRetriever.from_records(passages, cached_embedder, milvus_uri, name, progress=False)
    assert f"Milvus collection {name!r} already indexes the 12 passages: reused" in caplog.text
    attached = MilvusRetriever(milvus_uri, name, cached_embedder)  # another process attaching
    assert attached.search(ETHANOL_QUESTION, k=3) == reused.search(ETHANOL_QUESTION, k=3)


@pytest.mark.milvus
def test_a_collection_of_another_corpus_is_refused(milvus_uri, name, passages, cached_embedder):
    MilvusRetriever.from_records(passages[:6], cached_embedder, milvus_uri, name, progress=False)
    with pytest.raises(CollectionMismatchError, match=f"{name!r} holds 3 records not in this corpus"):
        MilvusRetriever.from_records(passages[3:9], cached_embedder, milvus_uri, name, progress=False)


@pytest.mark.milvus
def test_attaching_needs_an_indexed_collection(milvus_uri, name, cached_embedder):
    with pytest.raises(CollectionMismatchError, match=f"{name!r} does not exist: index the corpus into it"):
        MilvusRetriever(milvus_uri, name, cached_embedder)
    MilvusCollection.open(milvus_client(milvus_uri), name, _FIELDS, cached_embedder.dimension)
    with pytest.raises(CollectionMismatchError, match=f"{name!r} holds no passages"):
        MilvusRetriever(milvus_uri, name, cached_embedder)


@pytest.mark.milvus
def test_from_jsonl_indexes_the_file(milvus_uri, name, passages, cached_embedder, tmp_path):
    path = tmp_path / "corpus.jsonl"
    write_jsonl(path, [{"id": p.id, "title": p.title, "text": p.text} for p in passages[:4]])
    retriever = MilvusRetriever.from_jsonl(path, cached_embedder, milvus_client(milvus_uri), name, progress=False)
    assert len(retriever) == 4
    assert retriever.search(passages[2].title, k=1)[0].id == passages[2].id
