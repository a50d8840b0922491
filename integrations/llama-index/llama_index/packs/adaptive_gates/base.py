"""``AdaptiveRAGPack``: an index, a gate and an ``AdaptiveQueryEngine`` in one object.

It follows the LlamaPack convention (``get_modules()`` and ``run(...)``; llama-index-core
0.14 no longer ships the ``BaseLlamaPack`` class those packs subclassed): give it
documents, and ``run(query)`` answers each query from the LLM alone or over retrieved
nodes, as the gate decides. With no gate given it uses the ``"stacked"`` gate the core
ships fitted (``adaptive_gates.pretrained``), which reads the question alone: no LLM
call and no retrieval to decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms.llm import LLM
from llama_index.core.schema import Document
from llama_index.query_engine.adaptive_gates import AdaptiveQueryEngine

from adaptive_gates import Gate, pretrained


class AdaptiveRAGPack:
    """Adaptive RAG over ``documents``.

    Args:
        documents: what the index holds.
        gate: any gate of the core (default: the shipped ``"stacked"`` gate).
        llm: the LLM answering (default ``Settings.llm``).
        embed_model: the index's embedding model (default ``Settings.embed_model``).
        similarity_top_k: nodes retrieved when the gate says retrieve.
    """

    def __init__(
        self,
        documents: Sequence[Document],
        gate: Gate | None = None,
        *,
        llm: LLM | None = None,
        embed_model: BaseEmbedding | None = None,
        similarity_top_k: int = 2,
    ) -> None:
        self.index = VectorStoreIndex.from_documents(list(documents), embed_model=embed_model)
        self.gate = gate if gate is not None else pretrained("stacked")
        self.query_engine = AdaptiveQueryEngine.from_index(
            self.index, self.gate, llm=llm, similarity_top_k=similarity_top_k
        )

    def get_modules(self) -> dict[str, Any]:
        """The pack's parts, by name: ``index``, ``gate`` and ``query_engine``."""
        return {"index": self.index, "gate": self.gate, "query_engine": self.query_engine}

    def run(self, query: str, **kwargs: Any) -> Any:
        """The engine's response to ``query`` (its ``metadata`` holds the decision)."""
        return self.query_engine.query(query, **kwargs)

    async def arun(self, query: str, **kwargs: Any) -> Any:
        """``run`` on the async path."""
        return await self.query_engine.aquery(query, **kwargs)
