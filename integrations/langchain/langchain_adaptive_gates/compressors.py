"""SeaKR's self-aware re-ranking as a LangChain document compressor."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from adaptive_gates import UncertaintyReranker
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field, PrivateAttr

#: Metadata key of each returned document: the LLM's uncertainty U after reading it.
UNCERTAINTY_KEY = "seakr_uncertainty"


class SeaKRCompressor(BaseDocumentCompressor):
    """Orders documents by the LLM's self-aware uncertainty U after reading each one
    (lowest first, ties in the given order, empty documents last) and keeps the
    ``top_n``; U is in each document's metadata under ``UNCERTAINTY_KEY`` (``inf`` when
    U is undefined or the document is empty).

    Drops into langchain-classic's ``ContextualCompressionRetriever``:

    .. code-block:: python

        ContextualCompressionRetriever(base_compressor=SeaKRCompressor(top_n=1),
                                       base_retriever=store.as_retriever(k=3))

    Args:
        reranker: the core's ``UncertaintyReranker`` (SeaKR's settings on the embedded
            LM when omitted: 20 samples per document, so give a smaller ``k`` for speed).
        top_n: documents kept (``None`` keeps all, re-ordered).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    reranker: Any = Field(default=None, exclude=True)
    top_n: int | None = Field(default=3, ge=1)

    _reranker: UncertaintyReranker | None = PrivateAttr(default=None)

    @property
    def uncertainty_reranker(self) -> UncertaintyReranker:
        """The core re-ranker (built on first use when none was given)."""
        if self._reranker is None:
            reranker = self.reranker if self.reranker is not None else UncertaintyReranker()
            if not isinstance(reranker, UncertaintyReranker):
                raise TypeError(f"reranker must be an UncertaintyReranker, got {type(reranker).__name__}")
            self._reranker = reranker
        return self._reranker

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The ``top_n`` documents the LLM is surest after, with their U; empty
        documents come last (the re-ranker cannot read them)."""
        readable = [d for d in documents if d.page_content.strip()]
        ranked = self.uncertainty_reranker.rerank(query, readable) if readable else []
        scored = [(r.item, r.uncertainty) for r in ranked]
        scored += [(d, math.inf) for d in documents if not d.page_content.strip()]
        kept = scored if self.top_n is None else scored[: self.top_n]
        return [d.model_copy(update={"metadata": {**d.metadata, UNCERTAINTY_KEY: u}}) for d, u in kept]
