"""Files written whole: the old content or the new, never a half-written file."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from adaptive_gates.persistence.atomic_file import replaced_whole, write_text_whole


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_new_file_is_written_with_its_folders(tmp_path):
    path = tmp_path / "a" / "b" / "report.json"
    write_text_whole(path, '{"é": 1}\n')
    assert path.read_bytes() == '{"é": 1}\n'.encode()
    assert _leftovers(path.parent) == []


def test_an_existing_file_is_replaced_and_keeps_its_mode(tmp_path):
    path = tmp_path / "report.txt"
    path.write_text("old")
    path.chmod(0o640)
    inode = path.stat().st_ino
    write_text_whole(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != inode  # a new file renamed over the old one, not rewritten in place
    assert _leftovers(tmp_path) == []


def test_an_error_in_the_block_leaves_the_old_file(tmp_path):
    path = tmp_path / "report.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="disk full"), replaced_whole(path) as fh:
        fh.write(b"half of the new")
        assert _leftovers(tmp_path) != []  # the new content goes beside it meanwhile
        raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_an_error_leaves_no_file_where_there_was_none(tmp_path):
    path = tmp_path / "report.txt"
    with pytest.raises(KeyboardInterrupt), replaced_whole(path) as fh:
        fh.write(b"partial")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_a_link_is_followed_and_kept(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text_whole(link, "new")
    assert link.is_symlink()
    assert target.read_text() == "new"


def test_a_pipe_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_text_whole(fifo, "through the pipe")
    reader.join(timeout=10)
    assert received == [b"through the pipe"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # still the pipe, nothing renamed over it
