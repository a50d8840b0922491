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


def require(module: str, extra: str = "local") -> ModuleType:
    """Import ``module`` (dotted names allowed) or raise a ``MissingExtraError`` (an
    ``ImportError``) naming ``pip install 'adaptive-gates[extra]'``."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module  # the module itself, or a package it needs
        raise MissingExtraError(
            f"{missing} is not installed (needed for {module}); it comes with the {extra!r} extra: "
            f"pip install 'adaptive-gates[{extra}]'"
        ) from exc
