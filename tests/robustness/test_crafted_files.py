"""Saved gates crafted by a stranger, their checksums made consistent again, so only
what the loaders check of each file stands in the way: every one refused with a
``GateLoadError`` naming the file or field and what is wrong, never a raw error or a
gate that fails at its first decision."""

import io
import json
import shutil

import faiss
import numpy as np
import pytest

from adaptive_gates import ExactMemory, GateLoadError, SKRKnnGate, load_gate
from adaptive_gates.persistence.saved_format import with_checksums
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.retrieval import BM25Retriever, DenseRetriever
from adaptive_gates.retrieval.dense import INDEX_FILE
from support.saved_layouts import resign

QUESTIONS = [
    "who wrote the play hamlet",
    "what is the capital city of france",
    "when did the second world war end",
    "how many legs does a spider have",
    "who painted the mona lisa",
    "what is the boiling point of water",
]
LABELS = [0, 0, 1, 1, 0, 1]


@pytest.fixture(scope="module")
def saved(embedder, tmp_path_factory):
    """Gates saved once: over the default faiss memory and over ``ExactMemory``."""
    root = tmp_path_factory.mktemp("saved")
    return {
        "faiss": SKRKnnGate(embedder, k=3).fit(QUESTIONS, LABELS).save(root / "faiss"),
        "exact": SKRKnnGate(embedder, k=3, memory=ExactMemory).fit(QUESTIONS, LABELS).save(root / "exact"),
    }


def _copy(saved, kind, tmp_path):
    return shutil.copytree(saved[kind], tmp_path / kind)


def _npy_header(shape, descr):
    """The header numpy writes for an array of ``shape``, with no data after it."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")


def _saved_npy(array):
    """``array`` as the bytes of a ``.npy`` file."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("questions.json", b"[" * 100_000, r"questions\.json: not readable JSON \(nested 100000 levels deep"),
        ("questions.json", b'["\xff\xfe"]', r"questions\.json: not valid UTF-8"),
        ("questions.json", b'["a", NaN]', r"questions\.json: not readable JSON \(NaN is not a number"),
        ("labels.npy", b"", r"labels\.npy: not a \.npy array"),
        ("labels.npy", _npy_header((1 << 40,), "|i1"), r"'labels\.npy' says it holds \(1099511627776,\) int8 values"),
        (
            "labels.npy",
            _saved_npy(np.zeros(6, dtype=[("a", "i1")])),
            r"'labels\.npy' holds .* values; expected a plain",
        ),
        ("labels.npy", _saved_npy(np.array(["0"] * 6)), r"'labels\.npy' holds <U1 values; expected a plain"),
        ("labels.npy", _saved_npy(np.zeros((6, 1), np.int8)), r"'labels\.npy' has shape \(6, 1\); expected 1 dim"),
    ],
    ids=["deep", "not-utf8", "nan", "empty-npy", "lying-header", "structured", "strings", "2-d"],
)
def test_a_crafted_memory_file_is_refused_naming_it(saved, embedder, tmp_path, name, content, message):
    path = _copy(saved, "faiss", tmp_path)
    (path / name).write_bytes(content)
    with pytest.raises(GateLoadError, match=message):
        SKRKnnGate.load(resign(path), embedder=embedder)


def test_a_deeply_nested_config_is_refused_naming_it(saved, tmp_path):
    path = _copy(saved, "faiss", tmp_path)
    (path / "config.json").write_bytes(b'{"format": ' + b"[" * 100_000)
    with pytest.raises(GateLoadError, match=r"config\.json: not readable JSON \(nested 100001 levels deep"):
        load_gate(path)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda v: v * np.nan, r"vector 0 has values that are not finite"),
        (lambda v: v * 2, r"vector 0 has length 2"),
    ],
    ids=["nan", "not-unit"],
)
def test_a_faiss_index_of_vectors_no_save_writes_is_refused(saved, embedder, tmp_path, change, message):
    path = _copy(saved, "faiss", tmp_path)
    index = faiss.read_index(str(path / "memory.faiss"))
    crafted = faiss.IndexFlatIP(index.d)
    crafted.add(np.ascontiguousarray(change(index.reconstruct_n(0, index.ntotal)), dtype=np.float32))
    faiss.write_index(crafted, str(path / "memory.faiss"))
    with pytest.raises(GateLoadError, match=rf"file 'memory\.faiss': {message}"):
        SKRKnnGate.load(resign(path), embedder=embedder)


@pytest.mark.parametrize("change, message", [(lambda v: v * np.nan, "not finite"), (lambda v: v * 2, "length 2")])
def test_a_dense_retriever_index_of_vectors_no_save_writes_is_refused(embedder, tmp_path, change, message):
    records = [CorpusRecord(str(i), "", q) for i, q in enumerate(QUESTIONS)]
    path = DenseRetriever.from_records(records, embedder).save(tmp_path / "dense")
    index_file = path / INDEX_FILE
    index = faiss.read_index(str(index_file))
    crafted = faiss.IndexFlatIP(index.d)
    crafted.add(np.ascontiguousarray(change(index.reconstruct_n(0, index.ntotal)), dtype=np.float32))
    faiss.write_index(crafted, str(index_file))
    with pytest.raises(GateLoadError, match=rf"file '{INDEX_FILE}': vector 0 has .*{message}"):
        DenseRetriever.load(resign(path), embedder)


def test_exact_memory_vectors_of_another_length_are_refused(saved, embedder, tmp_path):
    path = _copy(saved, "exact", tmp_path)
    np.save(path / "vectors.npy", np.load(path / "vectors.npy") * 3)
    with pytest.raises(GateLoadError, match=r"file 'vectors\.npy': vector 0 has length 3"):
        SKRKnnGate.load(resign(path), embedder=embedder, memory=ExactMemory)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["params"].update(k=10**400), r"k must be a positive integer \(at most 2\*\*63 - 1\)"),
        (lambda c: c["state"].update(dimension=10**12), r"field 'state\.dimension' must be an int in \[1, 65536\]"),
    ],
    ids=["k", "dimension"],
)
def test_an_integer_out_of_range_is_refused_naming_it(saved, embedder, tmp_path, edit, message):
    path = _copy(saved, "faiss", tmp_path)
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(with_checksums(config)))
    with pytest.raises(GateLoadError, match=message):
        SKRKnnGate.load(path, embedder=embedder)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("vocab.index.json", b"[" * 100_000, r"vocab\.index\.json: not readable JSON \(nested"),
        ("data.csc.index.npy", _npy_header((1 << 40,), "<f4"), r"'data\.csc\.index\.npy' says it holds"),
        ("indptr.csc.index.npy", b"", r"indptr\.csc\.index\.npy: not a \.npy array"),
    ],
    ids=["deep-vocab", "lying-header", "empty-npy"],
)
def test_a_crafted_bm25_index_file_is_refused_naming_it(tmp_path, name, content, message):
    path = BM25Retriever.from_records([CorpusRecord(str(i), "", q) for i, q in enumerate(QUESTIONS)]).save(
        tmp_path / "bm25"
    )
    (path / name).write_bytes(content)
    with pytest.raises(GateLoadError, match=message):
        BM25Retriever.load(resign(path))
