"""The retriever contract and the saving and loading both retrievers share."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptive_gates.errors import GateLoadError
from adaptive_gates.records.data import CorpusRecord, Hit, load_corpus
from adaptive_gates.retrieval import BM25Retriever, CachedRetriever
from adaptive_gates.retrieval.base import (
    CONFIG_FILE,
    CORPUS_FILE,
    Retriever,
    check_k,
    config_int,
    make_hit,
    passage_text,
    read_config,
    read_corpus,
    require_file,
    save_corpus,
    save_retriever,
)


@pytest.fixture(scope="module")
def passages(corpus_path):
    return load_corpus(corpus_path)[:20]


def test_a_real_retriever_satisfies_the_protocol(passages):
    bm25 = BM25Retriever.from_records(passages)
    assert isinstance(bm25, Retriever)
    assert isinstance(CachedRetriever(bm25), Retriever)
    assert not isinstance("a corpus", Retriever)
    hits = bm25.search(passages[3].title, k=2)
    assert all(isinstance(h, Hit) for h in hits)
    assert hits[0].id == passages[3].id


def test_check_k_validates_and_clips():
    assert check_k(3, 10) == 3
    assert check_k(50, 10) == 10
    for bad in [0, -1, 2.5, "3", True, None]:
        with pytest.raises(ValueError, match="k must be a positive int"):
            check_k(bad, 10)


def test_make_hit_and_passage_text(passages):
    record = passages[0]
    hit = make_hit(record, np.float32(0.75))
    assert hit == Hit(record.id, record.text, 0.75, record.title)
    assert type(hit.score) is float
    assert hit.as_passage() == passage_text(record.title, record.text) == f"{record.title}: {record.text}"
    assert passage_text("", "just text") == "just text"


def _save_toy(path, records, **config):
    def write_files(directory):
        save_corpus(directory, records)

    return save_retriever(path, {"type": "toy", "count": len(records), **config}, write_files, overwrite=False)


def test_a_saved_retriever_reads_back_checked(tmp_path, passages):
    path = _save_toy(tmp_path / "toy", passages[:5], note="five")
    config = read_config(path, "toy")
    assert (config["type"], config["count"], config["note"], config["state"]) == ("toy", 5, "five", {})
    assert config_int(config, path, "count") == 5
    assert read_corpus(path, 5) == passages[:5]
    with pytest.raises(GateLoadError, match="field 'type' is 'toy', expected 'dense'"):
        read_config(path, "dense")
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        _save_toy(path, passages[:5])


def test_a_changed_file_of_a_saved_retriever_is_refused(tmp_path, passages):
    path = _save_toy(tmp_path / "toy", passages[:5])
    with (path / CORPUS_FILE).open("a") as fh:
        fh.write(json.dumps({"id": "x", "title": "", "text": "planted"}) + "\n")
    with pytest.raises(GateLoadError, match=r"file 'corpus\.jsonl' does not match its checksum"):
        read_config(path, "toy")


def test_a_retriever_saved_before_checksums_still_loads(tmp_path, passages):
    save_corpus(tmp_path, passages[:2])
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"type": "toy", "format_version": 1, "count": 2}))
    config = read_config(tmp_path, "toy")
    assert config["count"] == 2
    assert read_corpus(tmp_path, 2) == passages[:2]


def test_config_int_and_require_file(tmp_path):
    config = {"count": 0, "negative": -1, "flag": True, "text": "3"}
    assert config_int(config, tmp_path, "count") == 0
    for name in ["negative", "flag", "text", "missing"]:
        with pytest.raises(GateLoadError, match=f"field '{name}' must be a non-negative int"):
            config_int(config, tmp_path, name)
    (tmp_path / "index.faiss").write_bytes(b"x")
    assert require_file(tmp_path, "index.faiss") == tmp_path / "index.faiss"
    with pytest.raises(GateLoadError, match=r"absent\.bin: missing"):
        require_file(tmp_path, "absent.bin")


def test_read_corpus_checks_its_count_and_its_lines(tmp_path, passages):
    save_corpus(tmp_path, passages[:3])
    with pytest.raises(GateLoadError, match=r"holds 3 records but config\.json field 'count' is 4"):
        read_corpus(tmp_path, 4)
    (tmp_path / CORPUS_FILE).write_text('{"id": "a", "text": "fine"}\nnot json\n')
    with pytest.raises(GateLoadError, match=CORPUS_FILE):
        read_corpus(tmp_path, 2)
    (tmp_path / CORPUS_FILE).unlink()
    with pytest.raises(GateLoadError, match="missing"):
        read_corpus(tmp_path, 2)


def test_save_corpus_keeps_index_order(tmp_path):
    records = [CorpusRecord("b", "B", "second"), CorpusRecord("a", "", "first")]
    save_corpus(tmp_path, records)
    assert load_corpus(tmp_path / CORPUS_FILE) == records
