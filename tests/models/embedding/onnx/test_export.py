"""The ONNX export of a sentence-transformers folder, cached on disk and checked.

The embedded MiniLM's export is made (or found) once, by the session's embedder;
caches of one's own in tmp_path show how a cached export is found, checked and
refused, without exporting again."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat

import numpy as np
import pytest

from adaptive_gates.errors import BackendError, UntrustedCacheError
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
    untrusted_export,
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


#: A user id that is not this process's (the tests run as root, which may give files away).
NOBODY = 65534


def _mode(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (lambda root: root.chmod(0o775), "writable by group or others (mode 0775)"),
        (lambda root: root.chmod(0o757), "writable by group or others (mode 0757)"),
        (lambda root: os.chown(root, NOBODY, NOBODY), f"owned by uid {NOBODY}, neither this user"),
    ],
    ids=["group-writable", "world-writable", "another-owner"],
)
def test_a_cache_another_user_can_write_is_refused_with_a_warning(tmp_path, monkeypatch, caplog, spoil, why):
    """A planted export with a matching manifest is not loaded from such a cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(root))
    target = root / f"onnx-{export_key(embedded_minilm_dir())[:32]}"
    _plant(target)
    assert cache_problem(target) is None  # the plant passes the manifest's check
    spoil(root)
    expected = f"{root}: .*{re.escape(why)}"
    with caplog.at_level(logging.WARNING), pytest.raises(UntrustedCacheError, match=expected) as refused:
        cached_export(embedded_minilm_dir())
    assert "ADAPTIVE_GATES_CACHE" in str(refused.value) and isinstance(refused.value, BackendError)
    assert any(why in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert sorted(p.name for p in root.iterdir()) == [target.name]  # no lock made, nothing written


def _owned_by_nobody(path) -> None:
    os.chown(path, NOBODY, NOBODY)


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (_owned_by_nobody, f"owned by uid {NOBODY}"),
        (lambda target: (target / "model.onnx").chmod(0o666), "model.onnx is writable by group or others"),
        (lambda target: _owned_by_nobody(target / "manifest.json"), f"manifest.json is owned by uid {NOBODY}"),
        (lambda target: target.chmod(0o777), "writable by group or others (mode 0777)"),
    ],
    ids=["folder-of-another-user", "writable-model", "manifest-of-another-user", "writable-folder"],
)
def test_an_export_another_user_could_have_written_is_untrusted(tmp_path, spoil, why):
    target = tmp_path / "onnx-x"
    _plant(target)
    assert untrusted_export(target) is None
    spoil(target)
    assert why in untrusted_export(target)
    assert cache_problem(target) is None  # its manifest alone would have let it load


def test_a_link_in_an_export_is_untrusted(tmp_path):
    target = tmp_path / "onnx-x"
    _plant(target)
    elsewhere = tmp_path / "elsewhere.onnx"
    (target / "model.onnx").rename(elsewhere)
    (target / "model.onnx").symlink_to(elsewhere)
    assert cache_problem(target) is None and "model.onnx is a symbolic link" in untrusted_export(target)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (_owned_by_nobody, f"owned by uid {NOBODY}"),
        (lambda target: (target / "model.onnx").chmod(0o646), "writable by group or others"),
        (lambda target: (target / "manifest.json").write_text(_nested(100_000)), "nested 100000 levels deep"),
    ],
    ids=["folder-of-another-user", "world-writable-model", "deeply-nested-manifest"],
)
def test_an_untrusted_or_unreadable_export_in_a_private_cache_is_discarded_and_made_again(
    tmp_path, monkeypatch, caplog, spoil, why
):
    """The planted or stale export is moved away and a new one is made: here the export
    of a copy of MiniLM's folder without its weights, which fails when it reads them."""
    root = tmp_path / "cache"
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(root))
    folder = _folder_copy(tmp_path)
    target = root / f"onnx-{export_key(folder)[:32]}"
    _plant(target)
    spoil(target)
    with caplog.at_level(logging.WARNING), pytest.raises(OSError, match=r"model\.safetensors"):
        cached_export(folder)  # no RecursionError, no planted file loaded: an export was attempted
    assert any("exporting again" in r.getMessage() and why in r.getMessage() for r in caplog.records)
    assert not target.exists() and list(root.iterdir()) == []  # the old one gone, no half-written one left


def test_a_deeply_nested_manifest_is_malformed_not_a_recursion_error(tmp_path):
    target = tmp_path / "onnx-x"
    _plant(target)
    (target / "manifest.json").write_text(_nested(100_000))
    assert "missing or malformed" in cache_problem(target) and "nested" in cache_problem(target)


def test_an_export_is_readable_by_every_user_and_writable_by_its_owner_only(tmp_path, monkeypatch):
    """A real export into a fresh cache: folders 0755, files 0644, so a shared cache an
    administrator fills can be read by every user (whose processes load it without a lock)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(root))
    model = cached_export(embedded_minilm_dir())
    target = model.parent
    assert (_mode(root), _mode(target)) == (0o755, 0o755)
    assert {p.name: _mode(p) for p in target.iterdir()} == {"model.onnx": 0o644, "manifest.json": 0o644}
    assert untrusted_export(target) is None and cache_problem(target) is None
    assert cached_export(embedded_minilm_dir()) == model  # trusted: found again, not exported again
