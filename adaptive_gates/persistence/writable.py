"""Whether an output can be written, found out by trying before the work that makes it.

``os.access`` cannot tell: it says yes to root even in a folder made immutable
(``chattr +i``), where every write then fails. So the checks here open or create a
file for real and leave nothing behind, letting a command refuse an output it could
not write before it spends minutes on the work.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: The prefix of the temporary files the checks create and remove at once.
PROBE_PREFIX = ".adaptive-gates-probe-"


def check_writable(path: str | Path) -> None:
    """Raise ``OSError`` with a one-line reason unless a file can be written at ``path``.

    An existing file is opened for append and closed, its content untouched; where no
    file exists yet, ``check_creatable`` tries the folder it would be made in. Other
    existing things (a terminal, a pipe, a device) are left to the write itself:
    opening a pipe would wait for a reader.
    """
    path = Path(path)
    if path.is_file():
        try:
            with path.open("ab"):
                pass
        except OSError as exc:
            raise OSError(f"cannot write to {path} ({_cause(exc)})") from None
    elif not path.exists():
        check_creatable(path)


def check_creatable(path: str | Path) -> None:
    """Raise ``OSError`` with a one-line reason unless new files can be made next to ``path``.

    A temporary file is created and removed in the deepest folder on the way to
    ``path`` that exists: the folders missing below it are created there later. An
    ancestor that is a file, not a folder, fails the same way (``Not a directory``).
    """
    folder = _deepest_existing_ancestor(Path(path))
    try:
        fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=folder)
    except OSError as exc:
        raise OSError(f"cannot write in {folder} ({_cause(exc)})") from None
    os.close(fd)
    os.unlink(probe)


def _deepest_existing_ancestor(path: Path) -> Path:
    """The nearest parent of ``path`` that exists (``.`` or the root at the latest)."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _cause(exc: OSError) -> str:
    """The system's words for why an operation failed, e.g. ``Operation not permitted``."""
    return exc.strerror or str(exc)
