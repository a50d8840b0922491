"""The folder of the gates the installed package ships, which the package only reads.

A save into it (``Gate.save`` over a shipped gate, ``fit --out`` there) would replace
what every user of the installation loads by ``pretrained(...)``, so it is refused
(``ShippedGateError``); a load from it takes no lock (``directory_swap.reading``), so
loading a shipped gate writes nothing into the package. The maintainers' refit
(``benchmarks/fit_pretrained.py``) saves there inside ``writing_shipped_gates()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from ..errors import ShippedGateError

#: Where the package's shipped gates are (``bundled.shipped.pretrained_path``).
SHIPPED_ROOT = Path(__file__).resolve().parent.parent / "bundled" / "pretrained"

_writing: ContextVar[bool] = ContextVar("writing_shipped_gates", default=False)


def is_shipped(path: str | Path) -> bool:
    """Whether ``path`` (links and ``..`` resolved) is the shipped gates' folder or inside it."""
    return Path(path).resolve().is_relative_to(SHIPPED_ROOT)


def check_not_shipped(path: str | Path) -> None:
    """A ``ShippedGateError`` when a save to ``path`` would write into the shipped gates' folder."""
    if is_shipped(path) and not _writing.get():
        raise ShippedGateError(
            f"{path} is inside the folder of the gates the package ships ({SHIPPED_ROOT}); they are read, "
            "never replaced: save to a folder of your own"
        )


@contextlib.contextmanager
def writing_shipped_gates() -> Iterator[None]:
    """Saves in this block may write into the shipped gates' folder (the refit that makes them)."""
    token = _writing.set(True)
    try:
        yield
    finally:
        _writing.reset(token)
