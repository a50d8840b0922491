"""Embeddings both ways: the core's encoders as a LlamaIndex embedding model, and any
LlamaIndex embedding model as the core's ``Embedder`` (for SKR and Thrust)."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import Field, PrivateAttr

from adaptive_gates.models import AdaptedEmbedder, Embedder, sentence_embedder


class AdaptiveGatesEmbedding(BaseEmbedding):
    """A core ``Embedder`` (the embedded all-MiniLM-L6-v2 by default) as a LlamaIndex
    embedding model, e.g. ``Settings.embed_model`` for a ``VectorStoreIndex``.

    The same object can encode an index and an SKR/Thrust gate, so both see one vector
    space. Async calls run in a worker thread.

    Args:
        embedder: a core ``Embedder`` (the embedded MiniLM when omitted).
        embed_batch_size: texts per encoder call when LlamaIndex embeds nodes.
    """

    embedder: Any = Field(default=None, exclude=True, description="The core embedder.")

    _encoder: Embedder | None = PrivateAttr(default=None)

    def __init__(self, embedder: Embedder | None = None, **kwargs: Any) -> None:
        if embedder is not None and not isinstance(embedder, Embedder):
            raise TypeError(f"embedder must implement the core's Embedder protocol, got {type(embedder).__name__}")
        # a field of this model; mypy reads the parent model's generated __init__
        super().__init__(embedder=embedder, **kwargs)  # type: ignore[call-arg]
        encoder = self.encoder  # built now: a missing weight package is said here, not at the first text
        if not kwargs.get("model_name"):
            self.model_name = encoder.model_id

    @classmethod
    def class_name(cls) -> str:
        return "AdaptiveGatesEmbedding"

    @property
    def encoder(self) -> Embedder:
        """The core embedder (the embedded MiniLM when none was given)."""
        if self._encoder is None:
            self._encoder = self.embedder if self.embedder is not None else sentence_embedder()
        return self._encoder

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        if not texts:
            return []
        return self.encoder.embed(list(texts)).astype(float).tolist()

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._get_text_embedding(query)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)


class LlamaIndexEmbedder(AdaptedEmbedder):
    """The core's ``Embedder`` protocol over any LlamaIndex embedding model.

    Args:
        embed_model: the LlamaIndex embedding model.
        model_id: the id saved with fitted gates, so a gate is never loaded against
            another encoder (default: the model's ``model_name``, else its class name).
        dimension: the vector width; learnt from one probe embedding when omitted.
    """

    def __init__(
        self, embed_model: BaseEmbedding, *, model_id: str | None = None, dimension: int | None = None
    ) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise TypeError(f"embed_model must be a LlamaIndex BaseEmbedding, got {type(embed_model).__name__}")
        self.embed_model = embed_model
        name = embed_model.model_name if embed_model.model_name not in ("", "unknown") else None
        super().__init__(
            embed_model.get_text_embedding_batch,
            model_id or name or f"llama-index:{type(embed_model).__name__}",
            dimension=dimension,
        )
