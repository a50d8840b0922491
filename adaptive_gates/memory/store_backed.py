"""What an SKR memory over a framework's vector store (LangChain, LlamaIndex, ...) does
the same whatever the framework: the checks at construction, refusing a store that
already holds entries the memory did not add, the ids the store gave each question,
reading the stored vectors back, and the saved form that re-attaches to a store which
persisted itself (the memory saves the ids and labels of its entries, never the store).
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from ..errors import GateLoadError, StoreContentError
from ..persistence.saved_format import read_json_file
from .memories import (
    _check_parts,
    _dimension,
    _LabelledMemory,
    _read_labelled,
    _write_labelled,
    check_added,
    l2_normalise,
)

logger = logging.getLogger(__name__)

#: Metadata key of a stored question's label (0 known, 1 unknown).
LABEL_KEY = "skr_label"

_IDS_FILE = "store_ids.json"

_Memory = TypeVar("_Memory", bound="StoreBackedMemory")


def same_score(score: float) -> float:
    """The store's score kept as it is: right for a store that scores by cosine similarity."""
    return score


def cosine_distance(distance: float) -> float:
    """Cosine similarity from a cosine distance (``1 - cos``)."""
    return 1.0 - distance


def squared_l2(distance: float) -> float:
    """Cosine similarity from the squared L2 distance of unit vectors (``2 - 2 cos``)."""
    return 1.0 - distance / 2.0


#: The conversions of a store's score into cosine similarity that have a name: a memory
#: given one saves its name, so a gate loaded later is checked to read scores the same way.
SIMILARITIES: dict[str, Callable[[float], float]] = {
    "cosine": same_score,
    "cosine-distance": cosine_distance,
    "squared-l2": squared_l2,
}

#: A conversion given by name (a key of ``SIMILARITIES``) or as a function.
Similarity = str | Callable[[float], float]


def _conversion(similarity: Similarity) -> tuple[Callable[[float], float], str | None]:
    """The conversion function and its name (``None`` for an unnamed function)."""
    if isinstance(similarity, str):
        if similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {sorted(SIMILARITIES)} or a function, got {similarity!r}")
        return SIMILARITIES[similarity], similarity
    if not callable(similarity):
        raise TypeError(f"similarity must be a name or a function, got {type(similarity).__name__}")
    name = next((n for n, f in SIMILARITIES.items() if f is similarity), None)
    return similarity, name


class StoreBackedMemory(_LabelledMemory, ABC):
    """An ``SKRMemory`` over a vector store of type ``store_type``.

    A subclass names its framework's store type and supplies ``_put`` (store the
    questions), ``search``, ``_probe`` (any entry near a vector), ``_present`` (which
    ids the store holds) and ``_stored_vectors``.

    The store must be the memory's own: the first ``add`` (the gate's fit) refuses a
    store that already holds anything, with a ``StoreContentError`` (a ``ValueError``).
    A store shared with documents would return them as neighbours, which carry no SKR
    label, so every decision would fall back.

    Args:
        store: the vector store, holding this memory's questions only.
        dimension: the width of the gate's embeddings.
        similarity: turns the store's score into cosine similarity: a name among
            ``SIMILARITIES`` (``"cosine"``, the default, keeps it; ``"cosine-distance"``;
            ``"squared-l2"``) or a function. A name is saved with the gate and checked
            when it is loaded; a function must be passed again.
    """

    #: Recorded with a saved gate, so its memory is loaded by the same kind.
    kind: ClassVar[str]
    #: The framework's vector store type, and how to name it in an error.
    store_type: ClassVar[type]
    store_description: ClassVar[str]
    #: The store (a ``store_type``); a subclass names its type.
    store: Any

    def __init__(self, store: Any, dimension: int, *, similarity: Similarity = "cosine") -> None:
        if not isinstance(store, self.store_type):
            raise TypeError(f"store must be {self.store_description}, got {type(store).__name__}")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise ValueError(f"dimension must be a positive int, got {dimension!r}")
        super().__init__(dimension)
        self.store = store
        self._similarity, self.similarity_name = _conversion(similarity)
        self._ids: list[str] = []  # the store's id of each question, in the order added
        self._positions: dict[str, int] = {}  # the store's id -> index into labels and questions
        # The ids every memory of the same gate added (or restored from a saved gate),
        # shared by its factory: a refit knows its store's entries as the gate's own.
        self._gate_ids: set[str] = set()

    @classmethod
    def factory(
        cls: type[_Memory], make_store: Callable[[], Any], *, similarity: Similarity = "cosine"
    ) -> StoreMemoryFactory[_Memory]:
        """What ``SKRKnnGate(memory=...)`` takes: the embedding dimension -> a memory
        over the (empty) store ``make_store()`` returns; it also loads a saved gate
        over that store (see ``attach``)."""
        return StoreMemoryFactory(cls, make_store, similarity)

    @classmethod
    def attach(cls: type[_Memory], store: Any, *, similarity: Similarity = "cosine") -> StoreMemoryFactory[_Memory]:
        """What ``SKRKnnGate.load(path, memory=...)`` takes to bring back a gate saved
        over a store that persisted itself: ``store`` is that store, reloaded; the load
        checks it holds every question the gate had added."""
        return StoreMemoryFactory(cls, lambda: store, similarity)

    # ------------------------------------------------------------------ adding
    def add(self, vectors: np.ndarray, labels: Sequence[int], questions: Sequence[str]) -> None:
        """Store the questions with their labels and normalised embeddings. The first
        add refuses a store that holds entries already (``StoreContentError``)."""
        new_labels = check_added(vectors, labels, questions, self.dimension)
        if not len(questions):
            return
        normalised = l2_normalise(vectors)
        # The store is grown and searched under the memory's one lock: not every store
        # is safe to search while another thread adds (the in-memory ones iterate a dict).
        with self._lock:
            if not self._ids:
                self._refuse_foreign_entries()
            ids = list(self._put(normalised, new_labels, questions))
            if len(ids) != len(questions):
                raise RuntimeError(f"{type(self.store).__name__} stored {len(ids)} of {len(questions)} questions")
            self._record(ids, new_labels, questions)

    @abstractmethod
    def _put(self, vectors: np.ndarray, labels: np.ndarray, questions: Sequence[str]) -> list[str]:
        """Store the questions (normalised vectors, checked labels) and return the ids
        the store gave them, in order; called under the lock."""

    @abstractmethod
    def _probe(self, vector: list[float]) -> list[str]:
        """The ids of the entries (at most one) the store returns nearest ``vector``;
        called under the lock, empty for an empty store."""

    def _refuse_foreign_entries(self) -> None:
        """Raise ``StoreContentError`` if the store holds anything before the memory
        added its first question; called under the lock."""
        probe = [0.0] * self.dimension
        probe[0] = 1.0
        try:
            found = self._probe(probe)
        except Exception as exc:  # a store of other-width vectors fails the search
            raise StoreContentError(
                f"the {type(self.store).__name__} cannot be checked to be empty: searching it with a "
                f"{self.dimension}-d vector failed ({type(exc).__name__}: {exc}); give the SKR memory a new, "
                "empty store (collection) of its own"
            ) from exc
        if found and found[0] in self._gate_ids:
            raise StoreContentError(
                f"the {type(self.store).__name__} already holds the questions this gate's memory added before "
                f"(e.g. {found[0]!r}, added in this process or restored from the saved gate): fitting again "
                "would store them a second time beside the new ones. Grow the memory with "
                "gate.add(questions, labels), or fit over a new, empty store (collection)"
            )
        if found:
            raise StoreContentError(
                f"the {type(self.store).__name__} already holds entries this memory did not add (e.g. {found[0]!r}): "
                "the SKR memory needs a store (collection) of its own, since a search would return those entries "
                "as neighbours, which carry no SKR label, and every decision would fall back. Give it a new, "
                "empty store; to bring back a saved gate over its persisted store, use "
                f"SKRKnnGate.load(path, memory={type(self).__name__}.attach(store))"
            )

    def _record(self, ids: Sequence[str], labels: np.ndarray, questions: Sequence[str]) -> None:
        """Keep the ids the store gave the added questions, with their labels and
        texts; called under the lock."""
        start = len(self._ids)
        self._positions.update((node_id, start + i) for i, node_id in enumerate(ids))
        self._ids.extend(ids)
        self._gate_ids.update(ids)
        self._labels = np.concatenate([self._labels, labels])
        self._questions.extend(questions)

    def _foreign(self, entry_id: str) -> StoreContentError:
        """The error for a search that returned an entry this memory did not add."""
        return StoreContentError(
            f"the {type(self.store).__name__} returned {entry_id!r}, which this memory did not add "
            f"(no labelled SKR question, metadata {LABEL_KEY!r}): something else wrote to the memory's store; "
            "keep the store for the memory's questions only"
        )

    # ------------------------------------------------------------------ reading
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

    @abstractmethod
    def _present(self, ids: list[str]) -> set[str] | None:
        """Which of ``ids`` the store holds, or ``None`` when it cannot tell."""

    # ------------------------------------------------------------------ saved form
    def save(self, directory: Path) -> dict[str, Any]:
        """Write the memory's identity, not the store (which persists itself): the
        store's id, label and text of each question added, and the similarity name."""
        with self._lock:
            ids, labels, questions = list(self._ids), self._labels.copy(), list(self._questions)
        _write_labelled(directory, labels, questions)
        (directory / _IDS_FILE).write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8")
        return {
            "size": len(ids),
            "dimension": self.dimension,
            "store": type(self.store).__name__,
            "similarity": self.similarity_name,
        }

    def _restore(self, directory: Path, state: dict[str, Any]) -> None:
        """Take back the identity ``save`` wrote, once the store is checked to hold
        every saved id; the memory must be empty."""
        labels, questions = _read_labelled(directory)
        ids = _read_ids(directory)
        _check_parts(directory, state, _IDS_FILE, len(ids), labels, questions)
        saved_similarity = state.get("similarity")
        if saved_similarity is None and self.similarity_name is not None:
            raise GateLoadError(
                f"{directory}: the memory was saved with a similarity function that has no name; "
                f"pass the same function as {type(self).__name__}.attach(store, similarity=...)"
            )
        if saved_similarity is not None and saved_similarity != self.similarity_name:
            raise GateLoadError(
                f"{directory}: field 'state.similarity' is {saved_similarity!r} but the attached memory "
                f"converts scores by {self.similarity_name or 'an unnamed function'}; "
                f"attach with similarity={saved_similarity!r}"
            )
        present = self._present(ids)
        if present is None:
            logger.warning(
                "%s cannot list its entries: the %d saved questions are not checked to be there",
                type(self.store).__name__,
                len(ids),
            )
        else:
            missing = [i for i in ids if i not in present]
            if missing:
                raise GateLoadError(
                    f"{directory}: the attached {type(self.store).__name__} lacks {len(missing)} of the "
                    f"{len(ids)} questions the memory added (ids {', '.join(map(repr, missing[:3]))}"
                    f"{', ...' if len(missing) > 3 else ''}); attach the store the gate was saved over "
                    f"({state.get('store')}), persisted after its last add"
                )
        with self._lock:
            if self._ids:
                raise GateLoadError(f"{directory}: the memory to restore into holds {len(self._ids)} questions")
            self._record(ids, labels, questions)


def _read_ids(directory: Path) -> list[str]:
    ids = read_json_file(directory, _IDS_FILE)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(set(ids)) != len(ids):
        raise GateLoadError(f"{directory}: file {_IDS_FILE!r} must hold a list of distinct ids")
    return ids


class StoreMemoryFactory(Generic[_Memory]):
    """A gate's ``memory=`` for a store-backed memory (``factory`` and ``attach`` make
    one): called with the embedding dimension it builds the memory over
    ``make_store()``; ``load`` brings back a saved memory over that store."""

    def __init__(self, memory_type: type[_Memory], make_store: Callable[[], Any], similarity: Similarity) -> None:
        _conversion(similarity)  # a wrong name fails now, before any fitting
        self.memory_type = memory_type
        self.make_store = make_store
        self.similarity = similarity
        #: The saved gate's memory kind this loads.
        self.kind = memory_type.kind
        self._gate_ids: set[str] = set()  # what every memory made here added or restored

    def __call__(self, dimension: int) -> _Memory:
        memory = self.memory_type(self.make_store(), dimension, similarity=self.similarity)
        memory._gate_ids = self._gate_ids
        return memory

    def load(self, directory: Path, state: dict[str, Any]) -> _Memory:
        """The memory ``save`` wrote into ``directory``, over the store; refused (a
        ``GateLoadError``) when the store lacks a saved question."""
        memory = self(_dimension(directory, state))
        memory._restore(directory, state)
        return memory

    def __repr__(self) -> str:
        return f"{self.memory_type.__name__}.factory(similarity={self.similarity!r})"
