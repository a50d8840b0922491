"""A memo in front of a retriever: each (query, k) is searched once."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from .base import Hit, Retriever


class CachedRetriever:
    """Memoises another retriever's hits by query and ``k``.

    A corpus that does not change gives the same hits for the same query, so a query
    seen again (cross-fitting a gate that retrieves to decide, where every fold's gate
    searches the same questions; a repeated chatbot query) need not be searched again.
    Thread-safe. Unbounded: meant for a fixed set of questions, not a server.
    ``wrapped`` is the retriever searched (what a gate records it was fitted with).
    """

    def __init__(self, inner: Retriever) -> None:
        self.wrapped = inner
        self._found: dict[tuple[str, int], list[Hit]] = {}
        self._lock = threading.Lock()

    def search(self, query: str, k: int = 3) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        with self._lock:
            new = list(dict.fromkeys(q for q in queries if (q, k) not in self._found))
        if new:
            found = self.wrapped.search_batch(new, k)
            with self._lock:
                self._found.update(((q, k), list(hits)) for q, hits in zip(new, found))
        with self._lock:
            return [list(self._found[(q, k)]) for q in queries]
