"""The small protocols a gate needs from its backends.

Anything that satisfies them (a local HF model, an OpenAI-compatible client, a
LangChain or LlamaIndex adapter) can stand behind a gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import BackendError


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size vectors: a sentence encoder for SKR, the query
    representation f(q) for Thrust (``Representer`` is the same protocol).

    ``model_id`` and ``dimension`` are recorded with saved gates so a gate is never
    loaded against a different encoder. An embedder may also offer
    ``settings() -> dict`` (JSON values): what is needed to rebuild it; the built-in
    ones do, so a gate saved with an embedded model loads without arguments.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape ``(len(texts), dimension)``."""
        ...


def check_vectors(vectors: Any, n: int, source: str) -> np.ndarray:
    """``vectors`` as a finite float32 ``(n, d)`` array, or a ``BackendError`` saying what is wrong."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise BackendError(f"embedder {source!r} returned shape {vectors.shape} for {n} texts")
    if not np.all(np.isfinite(vectors)):
        raise BackendError(f"embedder {source!r} returned NaN or inf")
    return vectors
