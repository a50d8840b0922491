"""The small protocols a gate needs from its backends.

Anything that satisfies them (a local HF model, an OpenAI-compatible client, a
LangChain or LlamaIndex adapter) can stand behind a gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size vectors.

    ``model_id`` and ``dimension`` are recorded with saved gates so a gate is never
    loaded against a different encoder.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape ``(len(texts), dimension)``."""
        ...
