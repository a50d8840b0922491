"""A folder nothing can be created in or removed from, root included (the suite runs as
root, whom file modes do not stop): ``chattr +i`` while the block runs."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def immutable(folder: Path) -> Iterator[Path]:
    """``folder``, immutable inside the block and writable again after it (so pytest can
    remove it)."""
    subprocess.run(["chattr", "+i", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
