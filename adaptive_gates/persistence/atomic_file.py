"""Files written whole: the new content goes to a temporary file beside the target,
which then replaces it in one rename, so a write that fails (a full disk, a crash)
leaves the old file, or none, never an empty or half-written one.

Reports and plots are written this way. A target that is not a regular file (a
terminal, a pipe, ``/dev/stdout``) cannot be replaced and is written in place.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

#: Flags of the temporary file: created here and now, never through a link.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def replaced_whole(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to write the new content of ``path`` into; when the block ends
    without an error, the content is flushed to disk and replaces ``path`` at once.

    A link at ``path`` is followed: the file it points to is the one replaced. The
    replacement keeps an existing file's permission bits (a new file gets the usual
    ones, under the umask). On any error the temporary file is removed and ``path``
    is left as it was.
    """
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        with target.open("wb") as fh:  # a device or a pipe: nothing to rename over
            yield fh
        return
    mode = stat.S_IMODE(target.stat().st_mode) if target.is_file() else None
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary, fd = _create_beside(target)
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_text_whole(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole (``replaced_whole``)."""
    with replaced_whole(path) as fh:
        fh.write(text.encode("utf-8"))


def _create_beside(target: Path) -> tuple[Path, int]:
    """A new hidden file next to ``target`` and its descriptor; a name already taken
    (by a file or a link) is never opened, another is drawn."""
    while True:
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return temporary, os.open(temporary, _CREATE, 0o666)
        except FileExistsError:
            continue
