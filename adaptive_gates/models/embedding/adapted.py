"""The core's ``Embedder`` over a framework's encoder (LangChain, LlamaIndex, ...).

The integration packages give it the framework call that embeds a list of texts; it
adds what the gates rely on: a model id, a width learnt once, one ``BackendError`` for
every way the encoder can fail, and a check of what it returned.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import BackendError
from ..protocols import check_vectors


class AdaptedEmbedder:
    """An ``Embedder`` whose vectors come from ``encode(texts) -> vectors``.

    Args:
        encode: embeds a list of texts (rows of numbers, one per text).
        model_id: the id saved with fitted gates, so a gate is never loaded against
            another encoder.
        dimension: the vector width; learnt from one probe embedding when omitted.
    """

    def __init__(self, encode: Callable[[list[str]], Any], model_id: str, *, dimension: int | None = None) -> None:
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1):
            raise ValueError(f"dimension must be a positive int, got {dimension!r}")
        self._encode = encode
        self._model_id = model_id
        self._dimension = dimension
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        with self._lock:
            if self._dimension is None:
                self._dimension = int(self._checked(["dimension probe"]).shape[1])
            return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(len(texts), dimension)``; a failing or malformed encoder raises
        ``BackendError``."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._checked(texts)
        if vectors.shape[1] != self.dimension:
            raise BackendError(f"{self.model_id} returned {vectors.shape[1]}-d vectors, expected {self.dimension}-d")
        return vectors

    def _checked(self, texts: list[str]) -> np.ndarray:
        try:
            vectors = self._encode(texts)
        except Exception as exc:
            raise BackendError(f"{self.model_id} failed to embed {len(texts)} texts: {exc}") from exc
        return check_vectors(vectors, len(texts), self.model_id)
