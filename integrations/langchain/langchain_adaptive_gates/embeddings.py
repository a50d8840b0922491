"""Embeddings both ways: the core's encoders as LangChain ``Embeddings``, and any
LangChain ``Embeddings`` as the core's ``Embedder`` (for SKR and Thrust)."""

from __future__ import annotations

import asyncio

from langchain_core.embeddings import Embeddings

from adaptive_gates.models import AdaptedEmbedder, Embedder, sentence_embedder


class AdaptiveGatesEmbeddings(Embeddings):
    """A core ``Embedder`` (the embedded all-MiniLM-L6-v2 by default) as LangChain
    ``Embeddings``, e.g. for ``InMemoryVectorStore`` or faiss.

    The same object can encode a vector store and an SKR/Thrust gate, so both see one
    vector space. Async calls run in a worker thread.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        if embedder is not None and not isinstance(embedder, Embedder):
            raise TypeError(f"embedder must implement the core's Embedder protocol, got {type(embedder).__name__}")
        self.embedder = embedder if embedder is not None else sentence_embedder()

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


class LangChainEmbedder(AdaptedEmbedder):
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
        self.embeddings = embeddings
        super().__init__(embeddings.embed_documents, model_id or _model_name(embeddings), dimension=dimension)


def _model_name(embeddings: Embeddings) -> str:
    """The embeddings' ``model``/``model_name`` field, else their type."""
    for name in ("model", "model_name"):
        value = getattr(embeddings, name, None)
        if isinstance(value, str) and value:
            return value
    return f"langchain:{type(embeddings).__name__}"
