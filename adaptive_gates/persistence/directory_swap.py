"""A directory replaced so that its path always holds the old or the new one, and read
while no replacement swaps it: how a gate is saved and loaded safely.

A save never loses the gate that was there. It writes a hidden temporary folder
``.<name>.tmp.<random>`` next to ``path``, moves the old gate into a hidden folder
``.<name>.old.<random>`` (as ``.<name>.old.<random>/<name>``), renames the temporary
folder to ``path``, then deletes the old one. A process killed at any point leaves
either ``path`` intact or ``path`` missing with the old gate moved aside; recovery
rule: when ``path`` is missing, the hidden old folder holding ``<name>`` that was
modified last (the move into it sets its time) is moved back to ``path``. A
temporary folder is never loaded, complete or not. ``load`` and the next ``save``
apply this rule, and the next save deletes every hidden temporary or old folder of
``path``. Saves (and a load's recovery) into one path hold an exclusive
``fcntl.flock`` on the lock file ``.<name>.lock`` next to it (POSIX: Linux, macOS),
so concurrent saves run one after the other and the last one wins; the lock file
exists only while a save holds it (a killed save may leave it, empty and harmless:
the next save takes it over and removes it). A load holds a shared lock on the same
file while it reads (``reading``), so a save never swaps a directory half read.

Whoever handed over a gate may have planted names beside it. The lock file is opened
without following a link and refused unless it is a regular file of this process's
user (``_open_lock``); the temporary and old folders are made fresh by ``mkdtemp``
(never an existing name), and only real directories, never links, are removed or
moved back by the recovery rule.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import GateLoadError
from .shipped_folder import is_shipped

logger = logging.getLogger(__name__)


def replace_directory(path: Path, fill: Callable[[Path], None], check_target: Callable[[Path], None]) -> Path:
    """Put a directory that ``fill`` writes (into a fresh hidden temporary folder) at
    ``path``, under the lock of ``path``, after the recovery rule and
    ``check_target(path)`` (which raises to refuse the target); then remove the hidden
    leftovers of earlier saves."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path):
        _recover(path)
        check_target(path)  # under the lock: no other save is swapping ``path``
        for leftover in _hidden_folders(path, "tmp") + _hidden_folders(path, "old"):
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp.", dir=path.parent))
        try:
            fill(tmp)
            if path.exists():
                # The old gate goes into a private directory of its own, so no name the
                # user may have chosen is ever removed.
                old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
                try:
                    os.replace(path, old / path.name)
                except BaseException:
                    old.rmdir()
                    raise
                try:
                    os.replace(tmp, path)
                except BaseException:
                    # The old gate back; should that fail too, it stays aside, where the
                    # recovery rule finds it, never removed with the folder.
                    os.replace(old / path.name, path)
                    old.rmdir()
                    raise
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return path


def _hidden_pattern(path: Path, kind: str) -> re.Pattern[str]:
    """Names of the hidden ``kind`` ("tmp" or "old") folders of ``path``: exactly
    ``.<name>.<kind>.<random>`` (the random part has no dot, so the folders of a
    neighbour named e.g. ``<name>.tmp`` never match)."""
    return re.compile(rf"\.{re.escape(path.name)}\.{kind}\.[A-Za-z0-9_]+")


def _hidden_folders(path: Path, kind: str) -> list[Path]:
    """The hidden ``kind`` folders of ``path`` (real directories, no links)."""
    if not path.parent.is_dir():
        return []
    pattern = _hidden_pattern(path, kind)
    return [p for p in path.parent.iterdir() if pattern.fullmatch(p.name) and _is_real_directory(p)]


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def _acquire(lock_path: Path, operation: int) -> int:
    """A descriptor of the lock file at ``lock_path`` (created if need be, see
    ``_open_lock``) holding the ``fcntl.flock`` ``operation``. A process that waited on
    a lock file removed meanwhile finds it is no longer the one at that name and locks
    anew, so the lock admits what it should however often the file is removed and made
    again."""
    while True:
        fd = _open_lock(lock_path)
        fcntl.flock(fd, operation)
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock_path)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


#: What may stand at a lock file's name but a regular file, by ``open``'s failure.
_NOT_A_FILE = {errno.ELOOP: "a symbolic link", errno.EISDIR: "a directory", errno.ENXIO: "a socket"}


def _open_lock(lock_path: Path) -> int:
    """Open (or create) the lock file at ``lock_path``; ``FileExistsError`` naming it
    when something else stands there. The lock file sits beside a gate, where whoever
    handed over the gate may have planted one: it is never followed as a link (which
    would create or open the link's target, anywhere), never a pipe or device (opened
    without waiting), and must belong to this process's user."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno not in _NOT_A_FILE:
            raise
        what = _NOT_A_FILE[exc.errno]
    else:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
            return fd
        os.close(fd)
        what = f"owned by user {info.st_uid}" if stat.S_ISREG(info.st_mode) else "no regular file (a pipe or device)"
    raise FileExistsError(
        f"{lock_path}: {what}, not a regular file of this user, where the gate's lock file goes; "
        "a load or save neither follows nor uses it: remove it"
    )


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (``.<name>.lock`` next to it, in a folder
    that exists), removed again on release: one process at a time inside."""
    lock_path = _lock_path(path)
    fd = _acquire(lock_path, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.unlink(lock_path)  # while holding it: no one else holds this file
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Read the gate saved at ``path`` inside this block: no save swaps it meanwhile.

    A load reads ``config.json`` and then the files it lists, and a save elsewhere
    renames the directory between the two; so the block first puts back a gate an
    interrupted save moved aside, then holds a shared lock on ``.<name>.lock``, which
    saves wait for (loads do not wait for each other). The last reader out removes
    the lock file. Where no lock file can be made (a read-only folder, where no save
    can swap anything either) the block reads without one, as it reads the gates the
    package ships (``shipped_folder``: no save may replace them).
    """
    path = Path(path)
    if is_shipped(path):  # the package's own gates, which no save replaces: nothing written beside them
        yield
        return
    recover_interrupted_save(path)
    lock_path = _lock_path(path)
    try:
        fd = _acquire(lock_path, fcntl.LOCK_SH)
    except FileExistsError as exc:  # something planted at the lock's name
        raise GateLoadError(str(exc)) from None
    except OSError as exc:
        logger.debug("reading %s without a lock (%s)", path, exc)
        yield
        return
    try:
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by no one else?
        except BlockingIOError:
            pass  # another reader or a waiting save: the last one out removes the file
        else:
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(fd), os.stat(lock_path)):
                    os.unlink(lock_path)
        os.close(fd)


def _is_real_directory(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _recover(path: Path) -> None:
    """Apply the recovery rule (module docstring); call with the lock held."""
    if path.exists() or path.is_symlink():
        return
    moved = [p / path.name for p in _hidden_folders(path, "old") if _is_real_directory(p / path.name)]
    if moved:
        newest = max(moved, key=lambda p: p.parent.stat().st_mtime_ns)
        os.replace(newest, path)
        logger.warning("%s was missing after an interrupted save; restored the gate that was there", path)


def recover_interrupted_save(path: str | Path) -> None:
    """Put back the gate an interrupted save moved aside, if ``path`` is missing
    (the recovery rule of the module docstring). Does nothing, and creates no lock
    file, when there is nothing to recover."""
    path = Path(path)
    if path.exists() or path.is_symlink() or not _hidden_folders(path, "old"):
        return
    try:
        with exclusive_lock(path):
            _recover(path)
    except FileExistsError as exc:  # something planted at the lock's name
        raise GateLoadError(str(exc)) from None
    except OSError as exc:  # a folder the gate cannot be moved back in (read-only)
        moved = sorted(str(p / path.name) for p in _hidden_folders(path, "old"))
        raise GateLoadError(
            f"{path}: missing, and an interrupted save left the gate that was there in {', '.join(moved)}; "
            f"it cannot be moved back here ({exc.strerror or exc}): move it to {path} yourself"
        ) from None
