"""A memo in front of an embedder: each text is embedded once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..protocols import Embedder, check_vectors


class CachedEmbedder:
    """Memoises another embedder's vectors by text (least recently used dropped first).

    Embeddings and representations are deterministic, so a text seen again
    (cross-fitting, a sweep over gate settings, several gates sharing it, a repeated
    chatbot query) need not go through the model again. Thread-safe. ``store``
    pre-fills vectors computed elsewhere; with ``memoise=False`` only those are served
    from the table and every other text goes to the model each time (to time it).
    ``model_id``, ``dimension`` and ``settings`` are the inner embedder's.
    """

    def __init__(self, inner: Embedder, *, max_entries: int = 100_000, memoise: bool = True) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive int, got {max_entries!r}")
        self.inner = inner
        self.max_entries = max_entries
        self.memoise = memoise
        self._table: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def settings(self) -> dict[str, Any] | None:
        settings = getattr(self.inner, "settings", None)
        return settings() if callable(settings) else None

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, text: object) -> bool:
        return text in self._table

    def store(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Put precomputed vectors (one row per text) into the memo."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"expected {len(texts)} rows of vectors, got shape {vectors.shape}")
        with self._lock:
            for text, vector in zip(texts, vectors):
                self._table[text] = vector
                self._table.move_to_end(text)
            while len(self._table) > self.max_entries:
                self._table.popitem(last=False)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):  # not a batch of its characters
            raise TypeError("embed() takes a sequence of strings, not a single string")
        texts = list(texts)
        with self._lock:
            known = {t: self._table[t] for t in texts if t in self._table}
            for text in known:
                self._table.move_to_end(text)
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            fresh = check_vectors(self.inner.embed(missing), len(missing), self.inner.model_id)
            if self.memoise:
                self.store(missing, fresh)
            known.update(zip(missing, fresh))
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([known[t] for t in texts])

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, max_entries={self.max_entries}, memoise={self.memoise})"
