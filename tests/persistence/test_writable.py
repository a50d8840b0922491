"""Writability found out by trying, and nothing left behind."""

from __future__ import annotations

import os

import pytest

from adaptive_gates.persistence.writable import PROBE_PREFIX, check_creatable, check_writable
from support.immutable import immutable


def test_an_existing_file_is_checked_without_touching_it(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("kept")
    check_writable(path)
    assert path.read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_missing_file_is_probed_in_its_deepest_existing_folder(tmp_path):
    check_writable(tmp_path / "new" / "deeper" / "r.json")
    check_creatable(tmp_path / "gate")
    assert list(tmp_path.iterdir()) == []  # no probe left, no folder made


def test_an_ancestor_that_is_a_file_fails(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError, match=r"cannot write in .*file \(Not a directory\)"):
        check_writable(tmp_path / "file" / "r.json")


def test_an_immutable_folder_refuses_new_files_even_to_root(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    assert os.access(folder, os.W_OK)  # what os.access would wrongly promise
    with immutable(folder), pytest.raises(OSError, match=r"^cannot write in .*locked \(Operation not permitted\)$"):
        check_creatable(folder / "gate")
    assert not any(p.name.startswith(PROBE_PREFIX) for p in folder.iterdir())


def test_an_immutable_file_refuses_writing(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("kept")
    with (
        immutable(path),
        pytest.raises(OSError, match=r"^cannot write to .*report\.json \(Operation not permitted\)$"),
    ):
        check_writable(path)
    assert path.read_text() == "kept"


def test_a_pipe_is_left_to_the_write(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    check_writable(fifo)  # returns at once: opening it would wait for a reader
