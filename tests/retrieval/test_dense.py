"""Dense retrieval over the real MiniLM: cosine search with faiss, saved without pickle."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from adaptive_gates.errors import BackendError, GateLoadError, InvalidQuestionError
from adaptive_gates.models.embedding.adapted import AdaptedEmbedder
from adaptive_gates.records.data import load_corpus, passage_text, write_jsonl
from adaptive_gates.retrieval.dense import INDEX_FILE, DenseRetriever, unit_vectors

#: The question conftest's ``wiki_anchor`` writes for the first packaged passage.
ETHANOL_QUESTION = "How much energy does it take to make ethanol compared to what it gives?"


@pytest.fixture(scope="module")
def passages(corpus_path):
    return load_corpus(corpus_path)[:16]


@pytest.fixture(scope="module")
def dense(passages, cached_embedder):
    return DenseRetriever.from_records(passages, cached_embedder, batch_size=8)


def test_unit_vectors_are_normalised_float32_rows(cached_embedder, passages):
    texts = [p.title for p in passages[:4]]
    vectors = unit_vectors(cached_embedder, texts)
    assert vectors.dtype == np.float32
    assert vectors.flags.c_contiguous
    assert vectors.shape == (4, cached_embedder.dimension)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    raw = np.asarray(cached_embedder.embed(texts), dtype=np.float32)
    np.testing.assert_allclose(vectors, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


class _BrokenEmbedder:
    """A user's embedder whose output is unusable in the way ``embed`` says."""

    model_id = "broken"
    dimension = 4

    def __init__(self, output):
        self.output = output

    def embed(self, texts):
        return self.output


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (np.zeros((1, 3)), r"returned shape \(1, 3\), expected \(1, 4\)"),
        (np.full((1, 4), np.nan), "returned non-finite values"),
        ([["a", "b", "c", "d"]], "returned unusable output"),
    ],
)
def test_unusable_embedder_output_names_the_embedder(output, message):
    with pytest.raises(BackendError, match=f"embedder 'broken' {message}"):
        unit_vectors(_BrokenEmbedder(output), ["one text"])


def test_each_passage_finds_itself_first(dense, passages):
    assert len(dense) == 16
    queries = [passage_text(p.title, p.text) for p in passages[:10]]
    for passage, hits in zip(passages, dense.search_batch(queries, k=1)):
        assert hits[0].id == passage.id
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)


def test_a_natural_question_finds_its_passage(dense, passages):
    hits = dense.search(ETHANOL_QUESTION, k=3)
    assert hits[0].id == passages[0].id == "p0"
    assert hits[0].title == passages[0].title
    assert hits[0].text == passages[0].text


def test_scores_are_cosines_best_first_and_k_is_clipped(dense):
    hits = dense.search(ETHANOL_QUESTION, k=100)
    assert len(hits) == 16
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0 <= s <= 1.0 for s in scores)
    assert len({h.id for h in hits}) == 16


def test_batch_equals_single_searches(dense, passages):
    queries = [ETHANOL_QUESTION, passages[5].title, passages[9].title]
    batch = dense.search_batch(queries, k=3)
    for query, hits in zip(queries, batch):
        single = dense.search(query, k=3)
        assert [h.id for h in hits] == [h.id for h in single]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in single], atol=1e-5)
    assert dense.search_batch([], k=3) == []


@pytest.mark.parametrize("query", ["", "   ", None, "\u200b"])
def test_a_bad_query_is_refused(dense, query):
    with pytest.raises(InvalidQuestionError):
        dense.search(query)


def test_bad_k_and_bad_construction(dense, passages, cached_embedder):
    with pytest.raises(ValueError, match="k must be a positive int"):
        dense.search(ETHANOL_QUESTION, k=0)
    with pytest.raises(ValueError, match="empty corpus"):
        DenseRetriever.from_records([], cached_embedder)
    with pytest.raises(ValueError, match="batch_size must be positive"):
        DenseRetriever.from_records(passages[:2], cached_embedder, batch_size=0)
    with pytest.raises(ValueError, match="index holds 0 vectors for 2 passages"):
        DenseRetriever(cached_embedder, faiss.IndexFlatIP(cached_embedder.dimension), passages[:2])


def test_from_jsonl_indexes_the_file(tmp_path, passages, cached_embedder):
    path = tmp_path / "corpus.jsonl"
    write_jsonl(path, [{"id": p.id, "title": p.title, "text": p.text} for p in passages[:6]])
    retriever = DenseRetriever.from_jsonl(path, cached_embedder)
    assert len(retriever) == 6
    assert retriever.search(passages[4].title, k=1)[0].id == passages[4].id


def test_save_and_load_give_the_same_hits(tmp_path, dense, cached_embedder):
    path = dense.save(tmp_path / "dense")
    assert {p.name for p in path.iterdir()} == {"config.json", INDEX_FILE, "corpus.jsonl"}
    loaded = DenseRetriever.load(path, cached_embedder)
    assert len(loaded) == len(dense)
    assert loaded.search(ETHANOL_QUESTION, k=5) == dense.search(ETHANOL_QUESTION, k=5)
    with pytest.raises(FileExistsError):
        dense.save(path)
    dense.save(path, overwrite=True)


def test_load_refuses_another_embedder(tmp_path, dense, cached_embedder):
    path = dense.save(tmp_path / "dense")
    renamed = AdaptedEmbedder(cached_embedder.embed, "another-model", dimension=cached_embedder.dimension)
    with pytest.raises(
        GateLoadError, match=f"field 'model_id' is '{cached_embedder.model_id}' but the embedder is 'another"
    ):
        DenseRetriever.load(path, renamed)
    narrower = AdaptedEmbedder(
        lambda texts: cached_embedder.embed(texts)[:, :64], cached_embedder.model_id, dimension=64
    )
    with pytest.raises(
        GateLoadError, match=f"field 'dimension' is {cached_embedder.dimension} but the embedder .* gives 64"
    ):
        DenseRetriever.load(path, narrower)


def test_load_refuses_a_changed_index(tmp_path, dense, cached_embedder, passages):
    path = dense.save(tmp_path / "dense")
    other = DenseRetriever.from_records(passages[:15], cached_embedder)
    other.save(tmp_path / "other")
    (path / INDEX_FILE).write_bytes((tmp_path / "other" / INDEX_FILE).read_bytes())
    with pytest.raises(GateLoadError, match=r"file 'index\.faiss' does not match its checksum"):
        DenseRetriever.load(path, cached_embedder)
