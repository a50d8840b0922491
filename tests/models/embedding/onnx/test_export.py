"""The ONNX export of a sentence-transformers folder, cached on disk and checked.

The embedded MiniLM's export is made (or found) once, by the session's embedder;
caches of one's own in tmp_path show how a cached export is found, checked and
refused, without exporting again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from adaptive_gates.errors import BackendError
from adaptive_gates.models.embedded import cache_dir, embedded_minilm_dir
from adaptive_gates.models.embedding.onnx.export import (
    CHECK_SENTENCES,
    MIN_COSINE,
    ExportMismatch,
    cache_problem,
    cached_export,
    check_export,
    export_key,
    onnx_pipeline,
)
from adaptive_gates.models.embedding.st_folder import UnsupportedFolder


@pytest.fixture(scope="module")
def real_export(embedder):
    """The embedded MiniLM's export in the real cache."""
    _ = embedder.dimension  # exported, or found, by the session's embedder
    return cached_export(embedded_minilm_dir())


def _plant(target, content: bytes = b"an exported model") -> None:
    """A cached export of one's own: a model file and the manifest that describes it."""
    target.mkdir(parents=True)
    (target / "model.onnx").write_bytes(content)
    manifest = {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    (target / "manifest.json").write_text(json.dumps(manifest))


def _folder_copy(tmp_path):
    """The embedded MiniLM's small files, copied (the key reads names, sizes and times)."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("modules.json", "config.json", "sentence_bert_config.json", "tokenizer.json"):
        shutil.copy2(embedded_minilm_dir() / name, folder / name)
    shutil.copytree(embedded_minilm_dir() / "1_Pooling", folder / "1_Pooling")
    return folder


def test_the_key_depends_on_the_folders_files(tmp_path):
    folder = _folder_copy(tmp_path)
    key = export_key(folder)
    assert len(key) == 64 and int(key, 16) >= 0
    assert export_key(folder) == key
    (folder / "extra.txt").write_text("more")
    with_extra = export_key(folder)
    assert with_extra != key
    stat = (folder / "extra.txt").stat()
    os.utime(folder / "extra.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert export_key(folder) not in (key, with_extra)  # a touched file is another model
    assert export_key(embedded_minilm_dir()) != key


def test_a_cached_export_is_checked_against_its_manifest(tmp_path):
    target = tmp_path / "onnx-x"
    _plant(target)
    assert cache_problem(target) is None

    (target / "model.onnx").write_bytes(b"an exported modeL")  # same size, other bytes
    assert "SHA-256" in cache_problem(target)
    (target / "model.onnx").write_bytes(b"truncated")
    assert "9 bytes, its manifest says 17" in cache_problem(target)
    (target / "model.onnx").unlink()
    assert "cannot be read" in cache_problem(target)


@pytest.mark.parametrize("manifest", [None, "{not json", "[]", '{"size": 3}', '{"sha256": "ab"}'])
def test_a_missing_or_malformed_manifest_is_a_problem(tmp_path, manifest):
    target = tmp_path / "onnx-x"
    _plant(target)
    if manifest is None:
        (target / "manifest.json").unlink()
    else:
        (target / "manifest.json").write_text(manifest)
    assert "missing or malformed" in cache_problem(target)


def test_an_unsupported_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(tmp_path / "cache"))
    folder = _folder_copy(tmp_path)
    modules = json.loads((folder / "modules.json").read_text())
    modules[2] = {**modules[2], "type": "sentence_transformers.models.Dense", "path": "2_Dense"}
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(UnsupportedFolder, match="are not Transformer, Pooling"):
        cached_export(folder)
    assert not (tmp_path / "cache").exists()


def test_a_sound_cached_export_is_loaded_without_exporting(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(tmp_path))
    folder = embedded_minilm_dir()
    target = tmp_path / f"onnx-{export_key(folder)[:32]}"
    _plant(target)
    assert cached_export(folder) == target / "model.onnx"
    assert (target / "model.onnx").read_bytes() == b"an exported model"  # the file found, not a new export
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # the lock is gone again


def test_something_planted_at_the_locks_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(tmp_path))
    folder = embedded_minilm_dir()
    name = f"onnx-{export_key(folder)[:32]}"
    _plant(tmp_path / name)
    (tmp_path / f".{name}.lock").mkdir()
    with pytest.raises(FileExistsError, match="a directory"):
        cached_export(folder)


def test_the_real_export_is_cached_with_its_manifest(real_export):
    assert real_export.name == "model.onnx"
    assert real_export.parent.parent == cache_dir()
    assert cache_problem(real_export.parent) is None
    manifest = json.loads((real_export.parent / "manifest.json").read_text())
    assert manifest["size"] == real_export.stat().st_size
    assert manifest["min_cosine"] >= MIN_COSINE
    assert manifest["folder"] == str(embedded_minilm_dir())
    assert cached_export(embedded_minilm_dir()) == real_export  # found again, not exported again


def test_the_real_export_matches_sentence_transformers(real_export):
    assert check_export(embedded_minilm_dir(), real_export) >= MIN_COSINE


def test_the_export_runs_as_the_folders_pipeline(real_export, embedder):
    pipeline = onnx_pipeline(embedded_minilm_dir(), real_export, threads=1)
    assert pipeline.max_length == 256
    texts = list(CHECK_SENTENCES[:3])
    vectors = pipeline.embed(texts, normalize=True, batch_size=8)
    np.testing.assert_allclose(vectors, embedder.embed(texts), atol=1e-5)


def test_a_mismatching_export_is_a_backend_error():
    assert issubclass(ExportMismatch, BackendError)
    assert MIN_COSINE < 1
