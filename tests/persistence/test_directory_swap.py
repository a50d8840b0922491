"""A directory replaced whole under a lock, read under a shared lock, and put back
after an interrupted save."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading

import pytest

from adaptive_gates.errors import GateLoadError
from adaptive_gates.persistence.directory_swap import (
    exclusive_lock,
    reading,
    recover_interrupted_save,
    replace_directory,
)


def _writer(text):
    def fill(folder):
        (folder / "config.json").write_text(text)

    return fill


def _accept(path):
    pass


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


@contextlib.contextmanager
def _immutable(path):
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_new_directory_is_put_in_place_and_nothing_else_is_left(tmp_path):
    gate = tmp_path / "sub" / "gate"
    assert replace_directory(gate, _writer("one"), _accept) == gate
    assert (gate / "config.json").read_text() == "one"
    assert _names(gate.parent) == ["gate"]  # no lock file, no hidden folder


def test_an_existing_directory_is_replaced_whole(tmp_path):
    gate = tmp_path / "gate"
    replace_directory(gate, lambda d: (d / "old-only.bin").write_bytes(b"x"), _accept)
    replace_directory(gate, _writer("two"), _accept)
    assert _names(gate) == ["config.json"]
    assert (gate / "config.json").read_text() == "two"
    assert _names(tmp_path) == ["gate"]


def test_a_failing_fill_leaves_the_old_directory(tmp_path):
    gate = tmp_path / "gate"
    replace_directory(gate, _writer("kept"), _accept)

    def fail(folder):
        (folder / "config.json").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_directory(gate, fail, _accept)
    assert (gate / "config.json").read_text() == "kept"
    assert _names(tmp_path) == ["gate"]


def test_a_refused_target_is_not_written(tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "notes.txt").write_text("the user's")
    filled = []

    def refuse(path):
        raise FileExistsError(f"{path} is not a saved gate")

    with pytest.raises(FileExistsError, match="is not a saved gate"):
        replace_directory(gate, filled.append, refuse)
    assert filled == []
    assert _names(gate) == ["notes.txt"]
    assert _names(tmp_path) == ["gate"]


def _interrupted(tmp_path, name, suffix, text, mtime):
    """A gate an interrupted save moved aside, as the save leaves it."""
    aside = tmp_path / f".{name}.old.{suffix}"
    (aside / name).mkdir(parents=True)
    (aside / name / "config.json").write_text(text)
    os.utime(aside, (mtime, mtime))
    return aside


def test_recovery_puts_back_the_newest_gate_moved_aside(tmp_path):
    gate = tmp_path / "gate"
    _interrupted(tmp_path, "gate", "older1", "older", 1_000_000)
    _interrupted(tmp_path, "gate", "newer2", "newer", 2_000_000)
    recover_interrupted_save(gate)
    assert (gate / "config.json").read_text() == "newer"
    assert not (tmp_path / ".gate.lock").exists()


def test_recovery_does_nothing_without_a_gate_aside(tmp_path):
    gate = tmp_path / "gate"
    recover_interrupted_save(gate)
    assert list(tmp_path.iterdir()) == []
    gate.mkdir()
    _interrupted(tmp_path, "gate", "abc", "aside", 1_000_000)
    recover_interrupted_save(gate)  # the gate is there: what is aside stays aside
    assert _names(gate) == []


def test_the_next_save_recovers_then_clears_leftovers_but_not_a_neighbours(tmp_path):
    gate = tmp_path / "gate"
    _interrupted(tmp_path, "gate", "abc", "aside", 1_000_000)
    (tmp_path / ".gate.tmp.xyz").mkdir()
    # a neighbouring gate named "gate.tmp", with a save of its own interrupted
    _interrupted(tmp_path, "gate.tmp", "q1", "neighbour", 1_000_000)
    seen = []
    replace_directory(gate, _writer("new"), lambda p: seen.append((p / "config.json").read_text()))
    assert seen == ["aside"]  # recovered before the check
    assert (gate / "config.json").read_text() == "new"
    assert _names(tmp_path) == [".gate.tmp.old.q1", "gate"]


def test_a_link_at_the_lock_name_is_refused_and_not_followed(tmp_path):
    gate = tmp_path / "gate"
    replace_directory(gate, _writer("one"), _accept)
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / ".gate.lock").symlink_to(elsewhere)
    with pytest.raises(FileExistsError, match=r"\.gate\.lock: a symbolic link, not a regular file"):
        replace_directory(gate, _writer("two"), _accept)
    with pytest.raises(GateLoadError, match="a symbolic link"), reading(gate):
        pass
    assert not elsewhere.exists()
    assert (gate / "config.json").read_text() == "one"


def test_a_save_waits_for_a_reader(tmp_path):
    gate = tmp_path / "gate"
    replace_directory(gate, _writer("one"), _accept)
    saver = threading.Thread(target=replace_directory, args=(gate, _writer("two"), _accept))
    with reading(gate):
        saver.start()
        saver.join(timeout=0.5)
        assert saver.is_alive()  # blocked on the shared lock
        assert (gate / "config.json").read_text() == "one"
    saver.join(timeout=10)
    assert not saver.is_alive()
    assert (gate / "config.json").read_text() == "two"
    assert _names(tmp_path) == ["gate"]


def test_readers_share_the_lock_and_the_last_removes_it(tmp_path):
    gate = tmp_path / "gate"
    replace_directory(gate, _writer("one"), _accept)
    with reading(gate):
        with reading(gate):
            assert (tmp_path / ".gate.lock").is_file()
        assert (tmp_path / ".gate.lock").is_file()  # the outer reader still holds it
    assert _names(tmp_path) == ["gate"]


def test_exclusive_lock_excludes_a_second_holder(tmp_path):
    gate = tmp_path / "gate"
    order = []

    def second():
        with exclusive_lock(gate):
            order.append("second")

    other = threading.Thread(target=second)
    with exclusive_lock(gate):
        other.start()
        other.join(timeout=0.5)
        order.append("first")
    other.join(timeout=10)
    assert order == ["first", "second"]
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_folder_is_read_without_a_lock(tmp_path):
    gate = tmp_path / "gate"
    replace_directory(gate, _writer("one"), _accept)
    with _immutable(tmp_path), reading(gate):
        assert (gate / "config.json").read_text() == "one"


def test_a_gate_aside_that_cannot_be_moved_back_is_named(tmp_path):
    gate = tmp_path / "gate"
    aside = _interrupted(tmp_path, "gate", "abc", "aside", 1_000_000)
    with _immutable(tmp_path), pytest.raises(GateLoadError, match="cannot be moved back here") as caught:
        recover_interrupted_save(gate)
    assert str(aside / "gate") in str(caught.value)
