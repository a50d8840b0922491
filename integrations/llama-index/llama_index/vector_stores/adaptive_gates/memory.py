"""The SKR self-knowledge memory in any LlamaIndex vector store.

The store holds the past questions as ``TextNode``s with their label in the metadata,
so a store the user already runs (Qdrant, pgvector, Chroma, ...) carries the memory
past one machine. The nodes carry the gate's own embeddings, so the store searches the
very vectors the gate would and needs no embedding model of its own:

    gate = SKRKnnGate(embedder, memory=VectorStoreMemory.factory(SimpleVectorStore))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore, VectorStoreQuery, VectorStoreQueryResult
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from adaptive_gates.memory.memories import check_added, l2_normalise
from adaptive_gates.memory.store_backed import LABEL_KEY, StoreBackedMemory, same_score

__all__ = ["LABEL_KEY", "VectorStoreMemory"]


class VectorStoreMemory(StoreBackedMemory):
    """An ``SKRMemory`` (the core's protocol) over a LlamaIndex vector store.

    Args:
        store: the vector store (a ``BasePydanticVectorStore``), searched by embedding.
            It should hold this memory's questions only.
        dimension: the width of the gate's embeddings.
        similarity: turns the store's score into cosine similarity. The default keeps
            it, right for stores that score by cosine similarity (``SimpleVectorStore``
            does) or by inner product (the stored and the query vectors are
            L2-normalised); a store that returns cosine distance needs ``lambda d: 1 - d``.

    Counts and length are those of the questions added through this memory, and a
    search reads each neighbour's label and text from them by node id, so stores that
    keep no text (``SimpleVectorStore``) serve too; a node the memory did not add is
    refused. ``entries`` needs the stored vectors, which only a ``SimpleVectorStore``
    lets one read; ``save`` is not supported: the vector store persists itself.
    """

    kind: ClassVar[str] = "llama-index-vectorstore"
    store_type: ClassVar[type] = BasePydanticVectorStore
    store_description: ClassVar[str] = "a LlamaIndex BasePydanticVectorStore"
    store: BasePydanticVectorStore

    def __init__(
        self, store: BasePydanticVectorStore, dimension: int, *, similarity: Callable[[float], float] = same_score
    ) -> None:
        super().__init__(store, dimension, similarity=similarity)
        self._positions: dict[str, int] = {}  # node id -> index into the labels and questions

    def add(self, vectors: np.ndarray, labels: Sequence[int], questions: Sequence[str]) -> None:
        """Store the questions as nodes with their labels and normalised embeddings."""
        new_labels = check_added(vectors, labels, questions, self.dimension)
        if not len(questions):
            return
        nodes = [
            TextNode(text=question, metadata={LABEL_KEY: int(label)}, embedding=vector.tolist())
            for question, label, vector in zip(questions, new_labels, l2_normalise(vectors))
        ]
        # The store is grown and searched under one lock: not every store is safe to
        # search while another thread adds (SimpleVectorStore iterates a dict).
        with self._lock:
            ids = self.store.add(nodes)
            if len(ids) != len(nodes):
                raise RuntimeError(f"{type(self.store).__name__} stored {len(ids)} of {len(nodes)} nodes")
            start = len(self._questions)
            self._positions.update((node_id, start + i) for i, node_id in enumerate(ids))
            self._record(ids, new_labels, questions)

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
        ids = result.ids if result.ids is not None else [node.node_id for node in result.nodes or ()]
        if result.similarities is None or len(ids) != k or len(result.similarities) != k:
            raise RuntimeError(
                f"{type(self.store).__name__} returned {len(ids)} neighbours with "
                f"{'no' if result.similarities is None else len(result.similarities)} scores, expected {k}"
            )
        row = []
        for node_id, score in zip(ids, result.similarities):
            position = self._positions.get(node_id)
            if position is None:
                raise ValueError(
                    f"the {type(self.store).__name__} returned node {node_id!r}, which this memory did not add "
                    f"(no labelled SKR question, metadata {LABEL_KEY!r}); keep the memory's store for its "
                    "questions only, empty of nodes added before"
                )
            row.append((position, float(score)))
        return row
