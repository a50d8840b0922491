"""The SKR self-knowledge memory in any LangChain ``VectorStore``.

The store holds the past questions as texts with their label in the metadata, so a
store the user already runs (Qdrant, pgvector, Elastic, ...) carries the memory past
one machine. A store that takes vectors (``add_embeddings``, as FAISS has) is given
the gate's own; any other encodes the questions itself, so give it
``AdaptiveGatesEmbeddings`` over the gate's embedder: it then encodes them into the very
vectors the gate searches with.

    store = InMemoryVectorStore(AdaptiveGatesEmbeddings(embedder))
    gate = SKRKnnGate(embedder, memory=VectorStoreMemory.factory(lambda: store))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from adaptive_gates.memory.memories import check_added, l2_normalise
from adaptive_gates.memory.store_backed import LABEL_KEY, StoreBackedMemory, same_score
from adaptive_gates.selfknowledge import KNOWN, UNKNOWN

__all__ = ["LABEL_KEY", "VectorStoreMemory"]

#: By-vector searches returning ``(Document, score)`` pairs, in order of preference.
_SEARCH_METHODS = ("similarity_search_with_score_by_vector", "similarity_search_by_vector_with_relevance_scores")


class VectorStoreMemory(StoreBackedMemory):
    """An ``SKRMemory`` (the core's protocol) over a LangChain ``VectorStore``.

    Args:
        store: the vector store; it must search by vector with scores (one of
            ``similarity_search_with_score_by_vector`` or
            ``similarity_search_by_vector_with_relevance_scores``).
        dimension: the width of the gate's embeddings.
        similarity: turns the store's score into cosine similarity. The default keeps
            it, right for stores that score by cosine similarity (``InMemoryVectorStore``
            does); a store that returns cosine distance needs ``lambda d: 1 - d``.

    langchain-community's ``FAISS`` returns raw faiss scores, so build it empty over an
    index of the embeddings' width and pick one of two forms:

    - inner product: ``FAISS(embeddings, faiss.IndexFlatIP(d), InMemoryDocstore(), {},
      distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)``; the score is cosine
      similarity when the embeddings are L2-normalised (the embedded MiniLM's are).
    - FAISS's default squared L2: ``FAISS(embeddings, faiss.IndexFlatL2(d),
      InMemoryDocstore(), {}, normalize_L2=True)`` with ``similarity=lambda d: 1 - d / 2``
      (for unit vectors the squared distance is ``2 - 2 cos``); right for any embeddings.

    Counts and length are those of the questions added through this memory. The store
    encodes the questions itself (``add_texts``), so ``add`` checks it stored vectors of
    ``dimension``. ``entries`` needs the stored vectors, which only an
    ``InMemoryVectorStore`` lets one read; ``save`` is not supported: the vector store
    persists itself.
    """

    kind: ClassVar[str] = "langchain-vectorstore"
    store_type: ClassVar[type] = VectorStore
    store_description: ClassVar[str] = "a LangChain VectorStore"
    store: VectorStore

    def __init__(
        self, store: VectorStore, dimension: int, *, similarity: Callable[[float], float] = same_score
    ) -> None:
        super().__init__(store, dimension, similarity=similarity)
        method = next((getattr(store, m) for m in _SEARCH_METHODS if callable(getattr(store, m, None))), None)
        if method is None:
            raise TypeError(
                f"{type(store).__name__} cannot search by vector with scores; "
                f"VectorStoreMemory needs one of {', '.join(_SEARCH_METHODS)}"
            )
        self._search_by_vector = method

    def add(self, vectors: np.ndarray, labels: Sequence[int], questions: Sequence[str]) -> None:
        """Store the questions with their labels. A store that takes vectors
        (``add_embeddings``, as FAISS has) gets the gate's own, so nothing is embedded
        twice; any other encodes the questions itself with the embeddings it was given."""
        new_labels = check_added(vectors, labels, questions, self.dimension)
        if not len(questions):
            return
        metadatas = [{LABEL_KEY: int(label)} for label in new_labels]
        add_embeddings = getattr(self.store, "add_embeddings", None)
        # The store is searched and grown under the memory's one lock: not every store
        # is safe to search while another thread adds (InMemoryVectorStore iterates a dict).
        with self._lock:
            if callable(add_embeddings):
                pairs = list(zip(questions, l2_normalise(vectors).tolist()))
                ids = add_embeddings(pairs, metadatas=metadatas)
            else:
                ids = self.store.add_texts(list(questions), metadatas=metadatas)
                self._check_stored_width(ids)
            self._record(ids, new_labels, questions)

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        """The ``min(k, len)`` nearest stored questions of each query, nearest first."""
        queries = l2_normalise(vectors)
        with self._lock:
            k = min(k, len(self._questions))
            rows = [self._search_by_vector(query.tolist(), k=k) for query in queries] if k else [[] for _ in queries]
        sims = np.zeros((len(queries), k), dtype=np.float32)
        labels = np.zeros((len(queries), k), dtype=np.int8)
        texts: list[list[str]] = []
        for i, row in enumerate(rows):
            if len(row) != k:
                raise RuntimeError(f"{type(self.store).__name__} returned {len(row)} neighbours, expected {k}")
            for j, (document, score) in enumerate(row):
                sims[i, j] = self._similarity(score)
                labels[i, j] = _label_of(document.metadata, self.store)
            texts.append([document.page_content for document, _ in row])
        return sims, labels, texts

    def _stored_vectors(self) -> list[list[float]]:
        """The vectors of the added questions; only an ``InMemoryVectorStore`` lets
        them be read."""
        if not isinstance(self.store, InMemoryVectorStore):
            raise NotImplementedError(
                f"VectorStoreMemory cannot list the vectors of a {type(self.store).__name__}: only an "
                "InMemoryVectorStore exposes them, so SKR-cls and fixed demonstrations need that store "
                "(or FaissMemory / ExactMemory)"
            )
        return [self.store.store[i]["vector"] for i in self._ids]

    def _check_stored_width(self, ids: list[str]) -> None:
        """The store's embeddings must give the gate's width; checked where readable."""
        if isinstance(self.store, InMemoryVectorStore) and ids:
            width = len(self.store.store[ids[0]]["vector"])
            if width != self.dimension:
                self.store.delete(ids)
                raise ValueError(
                    f"the store's embeddings give {width}-d vectors but the gate's embedder gives "
                    f"{self.dimension}-d; build the store with AdaptiveGatesEmbeddings over the gate's embedder"
                )


def _label_of(metadata: dict[str, Any], store: VectorStore) -> int:
    label = metadata.get(LABEL_KEY)
    if label not in (KNOWN, UNKNOWN):
        raise ValueError(
            f"a document in the {type(store).__name__} has no SKR label (metadata {LABEL_KEY!r} = {label!r}); "
            "keep the memory's store for its questions only"
        )
    return int(label)
