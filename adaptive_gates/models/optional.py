"""Imports of the packages that come with an optional extra.

The core installs light (numpy, faiss, scikit-learn, bm25s, wordfreq); the local
models need torch, transformers, gguf and sentence-transformers from
``adaptive-gates[local]``, ``OpenAIChatModel`` needs ``openai`` (``[openai]``) and plots
need matplotlib (``[plot]``); ``[local]`` brings all of them. The first import of each
goes through ``require``, so what needs a missing extra says which one to install
instead of failing on a bare module name.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import MissingExtraError


def require(module: str, extra: str = "local", *, needed_for: str | None = None) -> ModuleType:
    """Import ``module`` (dotted names allowed) or raise a ``MissingExtraError`` (an
    ``ImportError``) naming ``pip install 'adaptive-gates[extra]'`` and, when given, what
    needs it (``needed_for``, e.g. ``"SentenceEmbedder"``)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module  # the module itself, or a package it needs
        if needed_for is not None:
            why = f" ({needed_for} needs it)"
        else:
            why = f" (needed for {module})" if missing != module else ""
        raise MissingExtraError(
            f"{missing} is not installed{why}; it comes with the {extra!r} extra: pip install 'adaptive-gates[{extra}]'"
        ) from exc
