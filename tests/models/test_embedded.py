"""The embedded models' files, the cache root, and the cache writes that no process
ever sees half done."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from adaptive_gates.models import embedded
from adaptive_gates.models.embedded import (
    MINILM_ID,
    SMOLLM2_ID,
    cache_dir,
    discard_dir,
    embedded_minilm_dir,
    embedded_smollm2_gguf,
    publish_dir,
    use_offline_hub,
)


def test_cache_dir_prefers_the_explicit_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "explicit"


def test_cache_dir_falls_back_to_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("ADAPTIVE_GATES_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "adaptive-gates"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "adaptive-gates"
    assert not cache_dir().exists()  # not created by asking


def test_cache_dir_expands_the_user(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", "~/models")
    assert cache_dir() == tmp_path / "models"


def test_use_offline_hub_forbids_downloads_unless_decided_otherwise(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    use_offline_hub()
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["TRANSFORMERS_OFFLINE"] == "0"  # the caller's choice stays


def test_the_embedded_gguf_is_a_gguf_file():
    path = embedded_smollm2_gguf()
    assert path.is_file()
    assert path.suffix == ".gguf"
    with path.open("rb") as fh:
        assert fh.read(4) == b"GGUF"


def test_the_embedded_minilm_is_a_sentence_transformers_folder():
    path = embedded_minilm_dir()
    assert (path / "modules.json").is_file()
    assert (path / "tokenizer.json").is_file()


def test_the_ids_name_the_embedded_models():
    assert "SmolLM2-135M-Instruct" in SMOLLM2_ID
    assert MINILM_ID == "sentence-transformers/all-MiniLM-L6-v2"


def _siblings(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir())


def test_publish_dir_renames_a_finished_folder_into_place(tmp_path):
    target = tmp_path / "cache" / "thing"

    def write(folder: Path) -> None:
        assert folder.parent == target.parent and folder != target
        assert not target.exists()  # nothing is visible while it is written
        (folder / "a.txt").write_text("one")

    publish_dir(target, write, "a thing")
    assert (target / "a.txt").read_text() == "one"
    assert _siblings(target) == ["thing"]  # no temporary folder left


def test_publish_dir_keeps_the_copy_another_process_published_first(tmp_path, caplog):
    target = tmp_path / "thing"
    target.mkdir()
    (target / "a.txt").write_text("first")

    def write(folder: Path) -> None:
        (folder / "a.txt").write_text("second")
        (folder / "b.txt").write_text("second")

    with caplog.at_level(logging.INFO, logger=embedded.__name__):
        publish_dir(target, write, "a thing")
    assert (target / "a.txt").read_text() == "first"
    assert not (target / "b.txt").exists()
    assert _siblings(target) == ["thing"]
    assert "first" in caplog.text


def test_publish_dir_leaves_nothing_when_the_writer_fails(tmp_path):
    target = tmp_path / "thing"

    def write(folder: Path) -> None:
        (folder / "half.txt").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish_dir(target, write, "a thing")
    assert _siblings(target) == []


def test_discard_dir_removes_a_folder_and_tolerates_a_missing_one(tmp_path):
    target = tmp_path / "corrupt"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "weights.bin").write_bytes(b"\0" * 10)
    discard_dir(target)
    assert list(tmp_path.iterdir()) == []
    discard_dir(target)  # already gone: nothing to do
    assert list(tmp_path.iterdir()) == []
