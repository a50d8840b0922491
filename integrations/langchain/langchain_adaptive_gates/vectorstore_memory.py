"""The SKR self-knowledge memory in any LangChain ``VectorStore``.

The store holds the past questions as texts with their label in the metadata, so a
store the user already runs (Qdrant, pgvector, Elastic, ...) carries the memory past
one machine. A store that takes vectors (``add_embeddings``, as FAISS has) is given
the gate's own; any other encodes the questions itself, so give it
``AdaptiveGatesEmbeddings`` over the gate's embedder: it then encodes them into the very
vectors the gate searches with.

    store = InMemoryVectorStore(AdaptiveGatesEmbeddings(embedder))
    gate = SKRKnnGate(embedder, memory=VectorStoreMemory.factory(lambda: store))

The store is the memory's own (a fit refuses one that holds documents already), and it
persists itself: a saved gate keeps the ids of its documents and re-attaches to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from adaptive_gates.extend import KNOWN, LABEL_KEY, UNKNOWN, Similarity, StoreBackedMemory, l2_normalise

__all__ = ["LABEL_KEY", "VectorStoreMemory"]

#: By-vector searches returning ``(Document, score)`` pairs, in order of preference.
_SEARCH_METHODS = ("similarity_search_with_score_by_vector", "similarity_search_by_vector_with_relevance_scores")


class VectorStoreMemory(StoreBackedMemory):
    """An ``SKRMemory`` (the core's protocol) over a LangChain ``VectorStore``.

    Args:
        store: the vector store, the memory's own: empty at the first add (the gate's
            fit), which refuses a store holding documents already (``StoreContentError``,
            a ``ValueError``). It must search by vector with scores (one of
            ``similarity_search_with_score_by_vector`` or
            ``similarity_search_by_vector_with_relevance_scores``).
        dimension: the width of the gate's embeddings.
        similarity: turns the store's score into cosine similarity: ``"cosine"`` (the
            default) keeps it, right for stores that score by cosine similarity
            (``InMemoryVectorStore`` does); ``"cosine-distance"`` for a store that returns
            ``1 - cos``; ``"squared-l2"`` for a squared L2 distance of unit vectors. A
            function serves too, but is not saved by name.

    langchain-community's ``FAISS`` returns raw faiss scores, so build it empty over an
    index of the embeddings' width and pick one of two forms:

    - inner product: ``FAISS(embeddings, faiss.IndexFlatIP(d), InMemoryDocstore(), {},
      distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)``; the score is cosine
      similarity when the embeddings are L2-normalised (the embedded MiniLM's are).
    - FAISS's default squared L2: ``FAISS(embeddings, faiss.IndexFlatL2(d),
      InMemoryDocstore(), {}, normalize_L2=True)`` with ``similarity="squared-l2"``
      (for unit vectors the squared distance is ``2 - 2 cos``); right for any embeddings.

    Counts and length are those of the questions added through this memory. The store
    encodes the questions itself (``add_texts``), so ``add`` checks it stored vectors of
    ``dimension``. ``entries`` needs the stored vectors, which only an
    ``InMemoryVectorStore`` lets one read. A search that meets a document this memory
    did not add gives the gate's fallback decision, naming it.

    Saving: ``gate.save(path)`` writes the gate and the memory's document ids, labels
    and questions, not the store, which persists itself (``InMemoryVectorStore.dump``
    writes JSON). After a restart, ``SKRKnnGate.load(path,
    memory=VectorStoreMemory.attach(store))`` with the store reloaded
    (``InMemoryVectorStore.load(file, embeddings)``) checks the store holds every
    document (by ``get_by_ids``) and decides as before.
    """

    kind: ClassVar[str] = "langchain-vectorstore"
    store_type: ClassVar[type] = VectorStore
    store_description: ClassVar[str] = "a LangChain VectorStore"
    store: VectorStore

    def __init__(self, store: VectorStore, dimension: int, *, similarity: Similarity = "cosine") -> None:
        super().__init__(store, dimension, similarity=similarity)
        method = next((getattr(store, m) for m in _SEARCH_METHODS if callable(getattr(store, m, None))), None)
        if method is None:
            raise TypeError(
                f"{type(store).__name__} cannot search by vector with scores; "
                f"VectorStoreMemory needs one of {', '.join(_SEARCH_METHODS)}"
            )
        self._search_by_vector = method

    def _put(self, vectors: np.ndarray, labels: np.ndarray, questions: Sequence[str]) -> list[str]:
        """Store the questions with their labels. A store that takes vectors
        (``add_embeddings``, as FAISS has) gets the gate's own, so nothing is embedded
        twice; any other encodes the questions itself with the embeddings it was given."""
        metadatas = [{LABEL_KEY: int(label)} for label in labels]
        add_embeddings = getattr(self.store, "add_embeddings", None)
        if callable(add_embeddings):
            return add_embeddings(list(zip(questions, vectors.tolist())), metadatas=metadatas)
        ids = self.store.add_texts(list(questions), metadatas=metadatas)
        self._check_stored_width(ids)
        return ids

    def _probe(self, vector: list[float]) -> list[str]:
        return [str(document.id) for document, _ in self._search_by_vector(vector, k=1)]

    def _present(self, ids: list[str]) -> set[str] | None:
        """The saved ids the store gives back by ``get_by_ids`` (``None`` where it cannot)."""
        try:
            return {str(document.id) for document in self.store.get_by_ids(ids)}
        except NotImplementedError:
            return None

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
                labels[i, j] = self._label_of(document)
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

    def _label_of(self, document: Document) -> int:
        """The label of a document the search returned, refused unless this memory added it."""
        label = document.metadata.get(LABEL_KEY)
        known_id = document.id is None or document.id in self._positions
        if label not in (KNOWN, UNKNOWN) or not known_id:
            raise self._foreign(str(document.id) if document.id is not None else document.page_content[:60])
        return int(label)

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
