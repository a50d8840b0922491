"""SeaKR's self-aware re-ranking as a LangChain document compressor."""

from __future__ import annotations

import math
from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field, PrivateAttr

from adaptive_gates import UncertaintyReranker

#: Metadata key of each returned document: the LLM's uncertainty U after reading it.
UNCERTAINTY_KEY = "seakr_uncertainty"
#: Metadata key of a document whose U could not be measured: why (it ranks last).
ERROR_KEY = "seakr_error"


class SeaKRCompressor(BaseDocumentCompressor):
    """Orders documents by the LLM's self-aware uncertainty U after reading each one
    (lowest first, ties in the given order, empty documents last) and keeps the
    ``top_n``; U is in each document's metadata under ``UNCERTAINTY_KEY`` (``inf`` when
    U is undefined or the document is empty). A document whose U cannot be measured
    (the probing model failed) ranks last with the reason under ``ERROR_KEY``, as
    LlamaIndex's ``SeaKRRerank`` ranks such a node.

    Drops into langchain-classic's ``ContextualCompressionRetriever``:

    .. code-block:: python

        ContextualCompressionRetriever(base_compressor=SeaKRCompressor(top_n=1),
                                       base_retriever=store.as_retriever(k=3))

    Args:
        reranker: the core's ``UncertaintyReranker`` (SeaKR's settings on the embedded
            LM when omitted: 20 samples per document, so give a smaller ``k`` for speed).
        top_n: documents kept (``None`` keeps all, re-ordered).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    reranker: UncertaintyReranker | None = Field(default=None, exclude=True)
    top_n: int | None = Field(default=3, ge=1)

    _reranker: UncertaintyReranker | None = PrivateAttr(default=None)

    @property
    def uncertainty_reranker(self) -> UncertaintyReranker:
        """The core re-ranker (built on first use when none was given)."""
        if self._reranker is None:
            self._reranker = self.reranker if self.reranker is not None else UncertaintyReranker()
        return self._reranker

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The ``top_n`` documents the LLM is surest after, with their U; empty
        documents come last (the re-ranker cannot read them)."""
        readable = [d for d in documents if d.page_content.strip()]
        ranked = self.uncertainty_reranker.rerank(query, readable) if readable else []
        scored = [
            (r.item, {UNCERTAINTY_KEY: r.uncertainty, **({ERROR_KEY: r.error} if r.error else {})}) for r in ranked
        ]
        scored += [(d, {UNCERTAINTY_KEY: math.inf}) for d in documents if not d.page_content.strip()]
        kept = scored if self.top_n is None else scored[: self.top_n]
        return [d.model_copy(update={"metadata": {**d.metadata, **added}}) for d, added in kept]
