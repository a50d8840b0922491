"""What an SKR memory over a framework's vector store (LangChain, LlamaIndex, ...) does
the same whatever the framework: the checks at construction, the factory a gate's
``memory=`` takes, the ids the store gave each question, reading the stored vectors
back, and refusing to be saved with the gate (the store persists itself)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from .memories import _LabelledMemory, l2_normalise

#: Metadata key of a stored question's label (0 known, 1 unknown).
LABEL_KEY = "skr_label"

_Memory = TypeVar("_Memory", bound="StoreBackedMemory")


def same_score(score: float) -> float:
    """The store's score kept as it is: right for a store that scores by cosine similarity."""
    return score


class StoreBackedMemory(_LabelledMemory, ABC):
    """An ``SKRMemory`` over a vector store of type ``store_type``.

    A subclass names its framework's store type and supplies ``add``, ``search`` and
    ``_stored_vectors``; when adding, it records what the store kept with ``_record``.

    Args:
        store: the vector store, holding this memory's questions only.
        dimension: the width of the gate's embeddings.
        similarity: turns the store's score into cosine similarity (the default keeps it).
    """

    #: The framework's vector store type, and how to name it in an error.
    store_type: ClassVar[type]
    store_description: ClassVar[str]
    #: The store (a ``store_type``); a subclass names its type.
    store: Any

    def __init__(self, store: Any, dimension: int, *, similarity: Callable[[float], float] = same_score) -> None:
        if not isinstance(store, self.store_type):
            raise TypeError(f"store must be {self.store_description}, got {type(store).__name__}")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise ValueError(f"dimension must be a positive int, got {dimension!r}")
        super().__init__(dimension)
        self.store = store
        self._similarity = similarity
        self._ids: list[str] = []  # the store's id of each question, in the order added

    @classmethod
    def factory(
        cls: type[_Memory], make_store: Callable[[], Any], *, similarity: Callable[[float], float] = same_score
    ) -> Callable[[int], _Memory]:
        """What ``SKRKnnGate(memory=...)`` takes: the embedding dimension -> a memory
        over the store ``make_store()`` returns."""

        def make(dimension: int) -> _Memory:
            return cls(make_store(), dimension, similarity=similarity)

        return make

    def _record(self, ids: Sequence[str], labels: np.ndarray, questions: Sequence[str]) -> None:
        """Keep the ids the store gave the added questions, with their labels and
        texts; called under the lock."""
        self._ids.extend(ids)
        self._labels = np.concatenate([self._labels, labels])
        self._questions.extend(questions)

    def entries(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every question added, in order, with its normalised stored vector; only a
        store that lets its vectors be read serves (see ``_stored_vectors``)."""
        with self._lock:
            stored = self._stored_vectors()
            labels, questions = self._labels.copy(), list(self._questions)
        vectors = np.asarray(stored, dtype=np.float32).reshape(len(questions), self.dimension)
        return l2_normalise(vectors), labels, questions

    @abstractmethod
    def _stored_vectors(self) -> list[list[float]]:
        """The store's vector of each added question, in order; called under the lock.
        Raises ``NotImplementedError`` naming the stores that serve when this one's
        vectors cannot be read."""

    def save(self, directory: Path) -> dict[str, Any]:
        """Not supported: the vector store persists itself."""
        raise NotImplementedError(
            f"{type(self).__name__} is not saved with the gate: the vector store ({type(self.store).__name__}) "
            "persists itself; keep the store, or use FaissMemory / ExactMemory for a gate saved to disk"
        )
