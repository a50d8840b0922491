"""The SKR self-knowledge memory in any LlamaIndex vector store.

The store holds the past questions as ``TextNode``s with their label in the metadata,
so a store the user already runs (Qdrant, pgvector, Chroma, ...) carries the memory
past one machine. The nodes carry the gate's own embeddings, so the store searches the
very vectors the gate would and needs no embedding model of its own:

    gate = SKRKnnGate(embedder, memory=VectorStoreMemory.factory(SimpleVectorStore))

The store is the memory's own (a fit refuses one that holds nodes already), and it
persists itself: a saved gate keeps the ids of its nodes and re-attaches to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore, VectorStoreQuery, VectorStoreQueryResult
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from adaptive_gates.extend import LABEL_KEY, Similarity, StoreBackedMemory, l2_normalise

from .pinned import refuse_unmet_pin

__all__ = ["LABEL_KEY", "VectorStoreMemory"]


class VectorStoreMemory(StoreBackedMemory):
    """An ``SKRMemory`` (the core's protocol) over a LlamaIndex vector store.

    Args:
        store: the vector store (a ``BasePydanticVectorStore``), searched by embedding:
            the memory's own, empty at the first add (the gate's fit), which refuses a
            store holding nodes already (``StoreContentError``, a ``ValueError``); never
            the documents' store (``index.vector_store``).
        dimension: the width of the gate's embeddings.
        similarity: turns the store's score into cosine similarity: ``"cosine"`` (the
            default) keeps it, right for stores that score by cosine similarity
            (``SimpleVectorStore`` does) or by inner product (the stored and the query
            vectors are L2-normalised); a store that returns cosine distance needs
            ``"cosine-distance"``. A function serves too, but is not saved by name.

    Counts and length are those of the questions added through this memory, and a
    search reads each neighbour's label and text from them by node id, so stores that
    keep no text (``SimpleVectorStore``) serve too; a node the memory did not add gives
    the gate's fallback decision, naming it. ``entries`` needs the stored vectors, which
    only a ``SimpleVectorStore`` lets one read.

    A store whose package pins a dependency the installed one does not meet is refused
    here (``BackendMisconfiguredError`` naming both versions): LlamaIndex's
    ``MilvusVectorStore`` needs pymilvus<3, and over the pymilvus 3 the core installs it
    fails after a Milvus restart.

    Saving: ``gate.save(path)`` writes the gate and the memory's node ids, labels and
    questions, not the store, which persists itself (``store.persist(file)``). After a
    restart, ``SKRKnnGate.load(path, memory=VectorStoreMemory.attach(store))`` with the
    store reloaded (``SimpleVectorStore.from_persist_path(file)``) checks the store holds
    every node and decides as before.
    """

    kind: ClassVar[str] = "llama-index-vectorstore"
    store_type: ClassVar[type] = BasePydanticVectorStore
    store_description: ClassVar[str] = "a LlamaIndex BasePydanticVectorStore"
    store: BasePydanticVectorStore

    def __init__(self, store: Any, dimension: int, *, similarity: Similarity = "cosine") -> None:
        refuse_unmet_pin(store)  # a store that would fail after a restart fails now, saying why
        super().__init__(store, dimension, similarity=similarity)

    def _put(self, vectors: np.ndarray, labels: np.ndarray, questions: Sequence[str]) -> list[str]:
        """Store the questions as nodes with their labels and embeddings."""
        nodes = [
            TextNode(text=question, metadata={LABEL_KEY: int(label)}, embedding=vector.tolist())
            for question, label, vector in zip(questions, labels, vectors)
        ]
        return self.store.add(nodes)

    def _probe(self, vector: list[float]) -> list[str]:
        result = self.store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=1))
        return _result_ids(result)

    def _present(self, ids: list[str]) -> set[str] | None:
        """The saved ids a ``SimpleVectorStore`` holds, or those any other store gives
        back by ``get_nodes`` (``None`` where it cannot)."""
        if isinstance(self.store, SimpleVectorStore):
            return set(ids) & self.store.data.embedding_dict.keys()
        try:
            return {node.node_id for node in self.store.get_nodes(node_ids=ids)}
        except NotImplementedError:
            return None

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        """The ``min(k, len)`` nearest stored questions of each query, nearest first."""
        queries = l2_normalise(vectors)
        sims = np.zeros((len(queries), 0), dtype=np.float32)
        labels = np.zeros((len(queries), 0), dtype=np.int8)
        with self._lock:
            k = min(k, len(self._questions))
            if not k:
                return sims, labels, [[] for _ in queries]
            results = [
                self.store.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=k))
                for query in queries
            ]
            rows = [self._neighbours(result, k) for result in results]
        sims = np.array([[self._similarity(score) for _, score in row] for row in rows], dtype=np.float32)
        labels = self._labels[[[position for position, _ in row] for row in rows]]
        texts = [[self._questions[position] for position, _ in row] for row in rows]
        return sims, labels, texts

    def _stored_vectors(self) -> list[list[float]]:
        """The vectors of the added questions; only a ``SimpleVectorStore`` lets them
        be read."""
        if not isinstance(self.store, SimpleVectorStore):
            raise NotImplementedError(
                f"VectorStoreMemory cannot list the vectors of a {type(self.store).__name__}: only a "
                "SimpleVectorStore exposes them, so SKR-cls and fixed demonstrations need that store "
                "(or FaissMemory / ExactMemory)"
            )
        return [self.store.get(node_id) for node_id in self._ids]

    def _neighbours(self, result: VectorStoreQueryResult, k: int) -> list[tuple[int, float]]:
        """``(position, score)`` of each neighbour the store returned, checked to be
        ``k`` of this memory's nodes; called under the lock."""
        ids = _result_ids(result)
        if result.similarities is None or len(ids) != k or len(result.similarities) != k:
            raise RuntimeError(
                f"{type(self.store).__name__} returned {len(ids)} neighbours with "
                f"{'no' if result.similarities is None else len(result.similarities)} scores, expected {k}"
            )
        row = []
        for node_id, score in zip(ids, result.similarities):
            position = self._positions.get(node_id)
            if position is None:
                raise self._foreign(node_id)
            row.append((position, float(score)))
        return row


def _result_ids(result: VectorStoreQueryResult) -> list[str]:
    return result.ids if result.ids is not None else [node.node_id for node in result.nodes or ()]
