"""Empty LangChain ``FAISS`` stores (langchain-community) for the tests."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings


def faiss_store(embeddings: Embeddings, dimension: int, *, inner_product: bool = True) -> Any:
    """An empty ``FAISS`` store: inner product over the embeddings (cosine similarity
    for L2-normalised ones, as the embedded MiniLM gives), or, with
    ``inner_product=False``, FAISS's default squared L2 over vectors it normalises."""
    import faiss
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS
    from langchain_community.vectorstores.utils import DistanceStrategy

    if inner_product:
        return FAISS(
            embeddings,
            faiss.IndexFlatIP(dimension),
            InMemoryDocstore(),
            {},
            distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
        )
    return FAISS(embeddings, faiss.IndexFlatL2(dimension), InMemoryDocstore(), {}, normalize_L2=True)
