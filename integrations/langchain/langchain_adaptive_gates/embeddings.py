"""Embeddings both ways: the core's encoders as LangChain ``Embeddings``, and any
LangChain ``Embeddings`` as the core's ``Embedder`` (for SKR and Thrust)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
from adaptive_gates import BackendError
from adaptive_gates.models import Embedder, SentenceEmbedder
from langchain_core.embeddings import Embeddings


class AdaptiveGatesEmbeddings(Embeddings):
    """A core ``Embedder`` (the embedded all-MiniLM-L6-v2 by default) as LangChain
    ``Embeddings``, e.g. for ``InMemoryVectorStore`` or faiss.

    The same object can encode a vector store and an SKR/Thrust gate, so both see one
    vector space. Async calls run in a worker thread.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        if embedder is not None and not isinstance(embedder, Embedder):
            raise TypeError(f"embedder must implement the core's Embedder protocol, got {type(embedder).__name__}")
        self.embedder = embedder if embedder is not None else SentenceEmbedder()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        if not texts:
            return []
        return self.embedder.embed(list(texts)).astype(float).tolist()

    def embed_query(self, text: str) -> list[float]:
        """The vector of one query."""
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)


class LangChainEmbedder:
    """The core's ``Embedder`` protocol over any LangChain ``Embeddings``.

    Args:
        embeddings: the LangChain embeddings.
        model_id: the id saved with fitted gates, so a gate is never loaded against
            another encoder (default: the embeddings' ``model``/``model_name`` field).
        dimension: the vector width; learnt from one probe embedding when omitted.
    """

    def __init__(self, embeddings: Embeddings, *, model_id: str | None = None, dimension: int | None = None) -> None:
        if not isinstance(embeddings, Embeddings):
            raise TypeError(f"embeddings must be LangChain Embeddings, got {type(embeddings).__name__}")
        if dimension is not None and (not isinstance(dimension, int) or dimension < 1):
            raise ValueError(f"dimension must be a positive int, got {dimension!r}")
        self.embeddings = embeddings
        self._model_id = model_id
        self._dimension = dimension
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        if self._model_id:
            return self._model_id
        for name in ("model", "model_name"):
            value = getattr(self.embeddings, name, None)
            if isinstance(value, str) and value:
                return value
        return f"langchain:{type(self.embeddings).__name__}"

    @property
    def dimension(self) -> int:
        with self._lock:
            if self._dimension is None:
                self._dimension = len(self.embeddings.embed_query("dimension probe"))
            return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(len(texts), dimension)``; a failing or malformed encoder raises
        ``BackendError``."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        try:
            vectors = np.asarray(self.embeddings.embed_documents(texts), dtype=np.float32)
        except Exception as exc:
            raise BackendError(f"{self.model_id} failed to embed {len(texts)} texts: {exc}") from exc
        if vectors.shape != (len(texts), self.dimension):
            raise BackendError(f"{self.model_id} returned shape {vectors.shape} for {len(texts)} texts")
        if not np.isfinite(vectors).all():
            raise BackendError(f"{self.model_id} returned NaN or inf embeddings")
        return vectors
