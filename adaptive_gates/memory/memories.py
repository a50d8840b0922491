"""SKR's self-knowledge memory: labelled past questions, searchable by similarity.

``SKRMemory`` is the small protocol the SKR gates need from it, so any vector store
(a LangChain or LlamaIndex one, through an adapter) can back them. ``FaissMemory``
(faiss inner product on L2-normalised vectors, SPEC §1.2: exact ``IndexFlatIP`` while
small, an approximate HNSW index past a size, see ``faiss_index``) is the default;
``ExactMemory`` is the exact search in plain numpy.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeGuard, runtime_checkable

import numpy as np

from ..errors import GateLoadError
from ..persistence.saved_format import MAX_DIMENSION, config_field, load_array, read_json_file, save_array
from ..records.selfknowledge import KNOWN, UNKNOWN
from . import faiss_index
from .faiss_index import DEFAULT_SWITCH_AT, IndexKind, IndexSettings

logger = logging.getLogger(__name__)

_INDEX_FILE = "memory.faiss"
_VECTORS_FILE = "vectors.npy"
_LABELS_FILE = "labels.npy"
_QUESTIONS_FILE = "questions.json"


@runtime_checkable
class SKRMemory(Protocol):
    """Questions labelled KNOWN (D+) or UNKNOWN (D-) with their embeddings.

    Similarity is cosine: an implementation normalises what it stores and what it is
    asked. Adding while other threads search must be safe. A memory class may also
    offer ``load(directory, state) -> memory`` (a classmethod) to read what ``save``
    wrote; ``save`` of a memory that cannot persist raises ``NotImplementedError``.
    """

    #: Recorded with saved gates, so a memory is never read by another kind.
    kind: ClassVar[str]

    @property
    def dimension(self) -> int: ...

    def __len__(self) -> int: ...

    @property
    def counts(self) -> tuple[int, int]:
        """``(m, n)``: the number of KNOWN and UNKNOWN questions."""
        ...

    def add(self, vectors: np.ndarray, labels: Sequence[int], questions: Sequence[str]) -> None:
        """Append questions with their labels and (not yet normalised) embeddings."""
        ...

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        """The ``min(k, len)`` nearest stored questions of each query, nearest first:
        similarities and labels of shape ``(queries, min(k, len))`` and the texts."""
        ...

    def entries(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every stored item in insertion order: normalised vectors, labels, questions
        (used to train SKR-cls and for fixed demonstrations)."""
        ...

    def save(self, directory: Path) -> dict[str, Any]:
        """Write the memory's files into ``directory``; return its JSON state."""
        ...


@runtime_checkable
class VerdictMemory(SKRMemory, Protocol):
    """An ``SKRMemory`` that keeps feedback verdicts itself, so every process sharing it
    reads the same ones: ``set_verdict`` relabels every stored copy of a question, and
    a gate reads its labels as they are instead of through its own ``FeedbackLog``
    (whose verdicts would go stale once another process judges the same question)."""

    #: True for a memory whose stored labels already carry the verdicts.
    keeps_verdicts: bool

    def set_verdict(self, question: str, label: int | None) -> None:
        """Relabel every stored copy of ``question`` (or of a wording differing only in
        case, punctuation or articles) to ``label``; ``None`` (its verdicts withdrawn)
        gives each copy back the label it was added with."""
        ...


@runtime_checkable
class RemovableMemory(SKRMemory, Protocol):
    """An ``SKRMemory`` that can take back one question it was given, so a gate can
    withdraw a lesson (``withdraw_feedback``) instead of only adding more."""

    def remove_copy(self, question: str, label: int) -> bool:
        """Remove the latest added copy of ``question`` (this exact text) stored with
        ``label``; ``False`` when it holds none."""
        ...


def keeps_verdicts(memory: SKRMemory) -> TypeGuard[VerdictMemory]:
    """Whether ``memory`` keeps the feedback verdicts itself (a ``VerdictMemory``)."""
    return isinstance(memory, VerdictMemory) and memory.keeps_verdicts


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Float32 C-contiguous copy with unit rows, so inner product = cosine."""
    import faiss

    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    faiss.normalize_L2(out)
    return out


def _counts(labels: np.ndarray) -> tuple[int, int]:
    n = int(labels.sum())
    return len(labels) - n, n


def check_added(vectors: np.ndarray, labels: Sequence[int], questions: Sequence[str], dimension: int) -> np.ndarray:
    """The labels as int8, once the three parts of an ``add`` agree."""
    if np.shape(vectors) != (len(questions), dimension):
        raise ValueError(f"expected vectors of shape {(len(questions), dimension)}, got {np.shape(vectors)}")
    new_labels = np.asarray(labels, dtype=np.int8)
    if new_labels.shape != (len(questions),) or not np.isin(new_labels, (KNOWN, UNKNOWN)).all():
        raise ValueError(f"expected {len(questions)} labels of 0 (known) or 1 (unknown), got {list(labels)!r}")
    return new_labels


def _write_labelled(directory: Path, labels: np.ndarray, questions: list[str]) -> None:
    save_array(directory, _LABELS_FILE, labels)
    (directory / _QUESTIONS_FILE).write_text(json.dumps(questions, ensure_ascii=False), encoding="utf-8")


def _read_labelled(directory: Path) -> tuple[np.ndarray, list[str]]:
    labels = load_array(directory, _LABELS_FILE, kinds="biu", ndim=1)
    if not np.isin(labels, (KNOWN, UNKNOWN)).all():
        raise GateLoadError(f"{directory}: file {_LABELS_FILE!r} holds labels other than 0/1")
    questions = read_json_file(directory, _QUESTIONS_FILE)
    if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
        raise GateLoadError(f"{directory}: file {_QUESTIONS_FILE!r} must hold a list of questions")
    return labels.astype(np.int8), questions


#: How far from 1 the norm of a stored vector may be: they are saved normalised in
#: float32, whose rounding stays far below this.
_NORM_TOLERANCE = 1e-3


def check_unit_rows(directory: Path, name: str, vectors: np.ndarray, first_row: int = 0) -> None:
    """Refuse stored vectors that are not finite or not of unit length (a zero vector,
    which normalising leaves zero, is kept): searched by inner product as cosine, they
    would rank neighbours by something else."""
    finite = np.isfinite(vectors).all(axis=1)
    norms = np.linalg.norm(np.where(finite[:, None], vectors, 0), axis=1)
    bad = ~finite | ((np.abs(norms - 1) > _NORM_TOLERANCE) & (norms != 0))
    if bad.any():
        row = int(np.argmax(bad))
        what = "values that are not finite" if not finite[row] else f"length {norms[row]:.6g}"
        raise GateLoadError(
            f"{directory}: file {name!r}: vector {first_row + row} has {what}; saved vectors are finite and of length 1"
        )


def check_index_rows(directory: Path, name: str, index: Any, block: int = 1 << 15) -> None:
    """``check_unit_rows`` over every vector of the faiss ``index`` loaded from the file
    ``name``, a block of rows at a time."""
    for start in range(0, index.ntotal, block):
        try:
            rows = index.reconstruct_n(start, min(block, index.ntotal - start))
        except RuntimeError as exc:
            raise GateLoadError(f"{directory}: file {name!r}: its vectors cannot be read ({exc})") from None
        check_unit_rows(directory, name, rows, start)


def _check_parts(directory: Path, state: dict[str, Any], vectors_file: str, n_vectors: int, labels, questions) -> None:
    size = config_field(state, "size", int, within="state")
    sizes = {"state.size": size, vectors_file: n_vectors, _LABELS_FILE: len(labels), _QUESTIONS_FILE: len(questions)}
    if len(set(sizes.values())) != 1:
        raise GateLoadError(f"{directory}: memory parts disagree in size: {sizes}")


def _dimension(directory: Path, state: dict[str, Any]) -> int:
    dimension = state.get("dimension")
    if isinstance(dimension, bool) or not isinstance(dimension, int) or not 1 <= dimension <= MAX_DIMENSION:
        raise GateLoadError(
            f"{directory}: field 'state.dimension' must be an int in [1, {MAX_DIMENSION}], got {dimension!r}"
        )
    return dimension


class _LabelledMemory:
    """What both memories keep beside their vectors: the labels and question texts in
    the order added, under one lock, and the counts read from them."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._labels = np.zeros(0, dtype=np.int8)
        self._questions: list[str] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._questions)

    @property
    def counts(self) -> tuple[int, int]:
        with self._lock:
            return _counts(self._labels)

    def _latest_copy(self, question: str, label: int) -> int | None:
        """The row of the latest added copy of ``question`` with ``label`` (under the lock)."""
        rows = reversed(range(len(self._questions)))
        return next((i for i in rows if self._questions[i] == question and self._labels[i] == label), None)


class FaissMemory(_LabelledMemory):
    """The default memory: faiss over L2-normalised embeddings (cosine, as the SKR
    authors' code). Exact ``IndexFlatIP`` while small; past ``switch_at`` rows an
    approximate index (HNSW by default), built from the stored rows the moment the
    memory crosses that size and grown by later adds (``faiss_index`` says how each
    kind grows). Saved in faiss's own format, with the settings in the state.

    Args:
        dimension: the embedding width.
        index: ``"auto"`` (exact, then HNSW), ``"exact"``, ``"hnsw"`` or ``"ivf"``.
        switch_at: rows from which an approximate index is used.
        **tuning: ``hnsw_m``, ``ef_construction``, ``ef_search``, ``nprobe``,
            ``retrain_growth`` (see ``IndexSettings``).

    ``FaissMemory.configured(index=..., ...)`` is the factory a gate's ``memory=`` takes.
    """

    kind: ClassVar[str] = "faiss"

    def __init__(
        self, dimension: int, *, index: IndexKind = "auto", switch_at: int = DEFAULT_SWITCH_AT, **tuning: Any
    ) -> None:
        super().__init__(dimension)
        self.settings = IndexSettings(index=index, switch_at=switch_at, **tuning)
        self._index = faiss_index.empty_exact(dimension)
        self._trained_rows = 0  # rows an IVF index was trained on
        self._build_lock = threading.Lock()  # one rebuild at a time

    @classmethod
    def configured(cls, **settings: Any) -> Callable[[int], FaissMemory]:
        """A factory (dimension -> memory) for ``SKRKnnGate(memory=...)`` with these
        settings; checked now, so a wrong one fails before any fitting."""
        IndexSettings(**settings)
        factory = functools.partial(cls, **settings)
        # a partial takes attributes: the kind and load of the class it builds
        factory.kind, factory.load = cls.kind, cls.load  # type: ignore[attr-defined]
        return factory

    @property
    def structure(self) -> str:
        """The index searched now: ``"exact"``, ``"hnsw"`` or ``"ivf"``."""
        with self._lock:
            return faiss_index.structure(self._index)

    def index_description(self) -> dict[str, Any]:
        """What is searched now, for reports: structure, rows, settings (and IVF's lists)."""
        with self._lock:
            description = {
                "structure": faiss_index.structure(self._index),
                "rows": int(self._index.ntotal),
                "settings": self.settings.to_state(),
            }
            if description["structure"] == "ivf":
                description["nlist"] = int(self._index.nlist)
            return description

    def set_search(self, *, ef_search: int | None = None, nprobe: int | None = None) -> None:
        """Change how hard the approximate search looks (HNSW ``ef_search``, IVF
        ``nprobe``) without rebuilding: more finds more true neighbours, slower."""
        with self._lock:
            current = self.settings
            self.settings = dataclasses.replace(
                current,
                ef_search=current.ef_search if ef_search is None else ef_search,
                nprobe=current.nprobe if nprobe is None else nprobe,
            )
            faiss_index.configure(self.settings, self._index)

    def add(self, vectors: np.ndarray, labels: Sequence[int], questions: Sequence[str]) -> None:
        new_labels = check_added(vectors, labels, questions, self.dimension)
        normalised = l2_normalise(vectors)
        with self._lock:
            faiss_index.add(self._index, normalised)
            self._labels = np.concatenate([self._labels, new_labels])
            self._questions.extend(questions)
            rebuild = faiss_index.needs_rebuild(self.settings, self._index, self._trained_rows)
        if rebuild:
            self._rebuild()

    def _rebuild(self) -> None:
        """Replace the index by a fresh build over its rows. The build runs outside the
        search lock, so decisions go on against the old index meanwhile; rows added
        during the build are carried over before the swap."""
        with self._build_lock:
            with self._lock:
                if not faiss_index.needs_rebuild(self.settings, self._index, self._trained_rows):
                    return  # another thread rebuilt it first
                rows = self._index.ntotal
                vectors = self._index.reconstruct_n(0, rows)
            fresh = faiss_index.build(self.settings, vectors)
            with self._lock:
                if self._index.ntotal > rows:
                    faiss_index.add(fresh, self._index.reconstruct_n(rows, self._index.ntotal - rows))
                faiss_index.configure(self.settings, fresh)  # set_search may have run meanwhile
                self._index, self._trained_rows = fresh, rows
            logger.info("SKR memory of %d rows now searched with a %s index", rows, faiss_index.structure(fresh))

    def remove_copy(self, question: str, label: int) -> bool:
        """Remove the latest copy of ``question`` with ``label``. faiss's approximate
        indexes cannot drop a row, so the index is built afresh over the rows left (as
        its size calls for); decisions wait for it."""
        with self._build_lock, self._lock:
            row = self._latest_copy(question, label)
            if row is None:
                return False
            vectors = np.delete(self._index.reconstruct_n(0, self._index.ntotal), row, axis=0)
            self._index = faiss_index.build(self.settings, vectors)
            self._trained_rows = len(vectors)
            self._labels = np.delete(self._labels, row)
            del self._questions[row]
        return True

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        queries = l2_normalise(vectors)
        with self._lock:
            k = min(k, self._index.ntotal)
            sims, idx = faiss_index.search(self._index, queries, k)
            labels = self._labels[idx]
            texts = [[self._questions[j] for j in row] for row in idx]
        return sims, labels, texts

    def entries(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        with self._lock:
            return self._index.reconstruct_n(0, self._index.ntotal), self._labels.copy(), list(self._questions)

    def save(self, directory: Path) -> dict[str, Any]:
        """Write the index (faiss's own format), labels and questions; the state holds
        the settings and what the index is."""
        with self._lock:
            faiss_index.write_index(self._index, directory / _INDEX_FILE)
            _write_labelled(directory, self._labels, self._questions)
            return {
                "size": len(self._questions),
                "dimension": self.dimension,
                "index": {
                    "settings": self.settings.to_state(),
                    "structure": faiss_index.structure(self._index),
                    "trained_rows": self._trained_rows,
                },
            }

    @classmethod
    def load(cls, directory: Path, state: dict[str, Any]) -> FaissMemory:
        """Read a memory written by ``save``, checking the parts agree. A memory saved
        before the index settings were recorded was exact: it loads with the default
        settings and switches to an approximate index on its next add past ``switch_at``."""
        import faiss

        dimension = _dimension(directory, state)
        settings, saved_structure, trained_rows = _index_state(directory, state)
        memory = cls(dimension, **settings.to_state())
        try:
            memory._index = faiss.read_index(str(directory / _INDEX_FILE))
        except (RuntimeError, MemoryError) as exc:  # faiss's checks; a size that cannot be allocated
            raise GateLoadError(f"{directory}: file {_INDEX_FILE!r} is not a faiss index ({exc})") from None
        memory._labels, memory._questions = _read_labelled(directory)
        _check_parts(directory, state, _INDEX_FILE, memory._index.ntotal, memory._labels, memory._questions)
        if memory._index.d != memory.dimension:
            raise GateLoadError(
                f"{directory}: field 'state.dimension' is {memory.dimension} but the index has {memory._index.d}"
            )
        problem = faiss_index.check_loaded(settings, memory._index, dimension)
        if problem is None and saved_structure not in (None, faiss_index.structure(memory._index)):
            problem = f"the state says {saved_structure!r} but the file holds {faiss_index.structure(memory._index)!r}"
        if problem:
            raise GateLoadError(f"{directory}: file {_INDEX_FILE!r} does not fit the memory's state: {problem}")
        check_index_rows(directory, _INDEX_FILE, memory._index)
        faiss_index.configure(settings, memory._index)
        memory._trained_rows = trained_rows
        return memory


def _index_state(directory: Path, state: dict[str, Any]) -> tuple[IndexSettings, str | None, int]:
    """The saved index settings, structure and IVF training size (defaults for a save
    that predates them)."""
    saved = state.get("index")
    if saved is None:
        return IndexSettings(), None, 0
    if not isinstance(saved, dict) or not isinstance(saved.get("settings"), dict):
        raise GateLoadError(f"{directory}: field 'state.index' is malformed")
    try:
        settings = IndexSettings.from_state(saved["settings"])
    except (TypeError, ValueError) as exc:
        raise GateLoadError(f"{directory}: field 'state.index.settings' is invalid ({exc})") from None
    trained_rows = saved.get("trained_rows")
    if isinstance(trained_rows, bool) or not isinstance(trained_rows, int) or trained_rows < 0:
        raise GateLoadError(f"{directory}: field 'state.index.trained_rows' must be an int >= 0")
    return settings, saved.get("structure"), trained_rows


class ExactMemory(_LabelledMemory):
    """Brute-force cosine search in numpy: no faiss, the vectors in one array.

    Ties in similarity go to the earlier stored question. Saved as ``.npy`` + JSON.
    """

    kind: ClassVar[str] = "exact"

    def __init__(self, dimension: int) -> None:
        super().__init__(dimension)
        self._vectors = np.zeros((0, dimension), dtype=np.float32)

    @staticmethod
    def _normalise(vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)  # a zero vector stays zero

    def add(self, vectors: np.ndarray, labels: Sequence[int], questions: Sequence[str]) -> None:
        new_labels = check_added(vectors, labels, questions, self.dimension)
        normalised = self._normalise(vectors)
        with self._lock:
            # New arrays, never resized in place: a search holding the old ones is unaffected.
            self._vectors = np.concatenate([self._vectors, normalised])
            self._labels = np.concatenate([self._labels, new_labels])
            self._questions = [*self._questions, *questions]

    def remove_copy(self, question: str, label: int) -> bool:
        """Remove the latest copy of ``question`` with ``label``."""
        with self._lock:
            row = self._latest_copy(question, label)
            if row is None:
                return False
            self._vectors = np.delete(self._vectors, row, axis=0)
            self._labels = np.delete(self._labels, row)
            self._questions = self._questions[:row] + self._questions[row + 1 :]
        return True

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        queries = self._normalise(vectors)
        with self._lock:
            stored, labels, questions = self._vectors, self._labels, self._questions
        sims = queries @ stored.T
        k = min(k, len(questions))
        idx = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(sims, idx, axis=1), labels[idx], [[questions[j] for j in row] for row in idx]

    def entries(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        with self._lock:
            return self._vectors.copy(), self._labels.copy(), list(self._questions)

    def save(self, directory: Path) -> dict[str, Any]:
        vectors, labels, questions = self.entries()
        save_array(directory, _VECTORS_FILE, vectors)
        _write_labelled(directory, labels, questions)
        return {"size": len(questions), "dimension": self.dimension}

    @classmethod
    def load(cls, directory: Path, state: dict[str, Any]) -> ExactMemory:
        memory = cls(_dimension(directory, state))
        vectors = load_array(directory, _VECTORS_FILE, kinds="f", ndim=2)
        if vectors.shape[1] != memory.dimension:
            raise GateLoadError(
                f"{directory}: file {_VECTORS_FILE!r} has shape {vectors.shape}, expected (size, {memory.dimension})"
            )
        check_unit_rows(directory, _VECTORS_FILE, vectors)
        memory._labels, memory._questions = _read_labelled(directory)
        _check_parts(directory, state, _VECTORS_FILE, len(vectors), memory._labels, memory._questions)
        memory._vectors = vectors.astype(np.float32)
        return memory
