"""SKR's self-knowledge memory: labelled past questions, searchable by similarity."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GateLoadError
from ..persistence import load_array, save_array
from ..selfknowledge import KNOWN, UNKNOWN

_INDEX_FILE = "memory.faiss"
_LABELS_FILE = "labels.npy"
_QUESTIONS_FILE = "questions.json"


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Float32 C-contiguous copy with unit rows, so inner product = cosine."""
    import faiss

    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    faiss.normalize_L2(out)
    return out


class SelfKnowledgeMemory:
    """Questions labelled KNOWN / UNKNOWN with normalised embeddings in a faiss
    ``IndexFlatIP``. Adding while other threads search is safe."""

    def __init__(self, dimension: int) -> None:
        import faiss

        self.dimension = dimension
        self._index = faiss.IndexFlatIP(dimension)
        self._labels = np.zeros(0, dtype=np.int8)
        self._questions: list[str] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._questions)

    @property
    def counts(self) -> tuple[int, int]:
        """``(m, n)``: the number of KNOWN (D+) and UNKNOWN (D-) questions."""
        with self._lock:
            n = int(self._labels.sum())
            return len(self._labels) - n, n

    @property
    def questions(self) -> list[str]:
        with self._lock:
            return list(self._questions)

    @property
    def labels(self) -> np.ndarray:
        with self._lock:
            return self._labels.copy()

    def embeddings(self) -> np.ndarray:
        """The stored (normalised) embeddings, shape ``(len, dimension)``."""
        with self._lock:
            return self._index.reconstruct_n(0, self._index.ntotal)

    def add(self, questions: Sequence[str], labels: Sequence[int], embeddings: np.ndarray) -> None:
        """Append labelled questions with their embeddings (normalised here)."""
        if embeddings.shape != (len(questions), self.dimension):
            raise ValueError(
                f"expected embeddings of shape {(len(questions), self.dimension)}, got {embeddings.shape}"
            )
        vectors = l2_normalise(embeddings)
        new_labels = np.asarray(labels, dtype=np.int8)
        with self._lock:
            self._index.add(vectors)
            self._labels = np.concatenate([self._labels, new_labels])
            self._questions.extend(questions)

    def search(self, embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        """The ``k`` nearest stored questions of each query: similarities, labels
        and texts, each of shape ``(queries, min(k, len))``."""
        queries = l2_normalise(embeddings)
        with self._lock:
            k = min(k, self._index.ntotal)
            sims, idx = self._index.search(queries, k)
            labels = self._labels[idx]
            texts = [[self._questions[j] for j in row] for row in idx]
        return sims, labels, texts

    def save(self, directory: Path) -> dict[str, Any]:
        """Write the index (faiss's own format), labels and questions."""
        import faiss

        with self._lock:
            faiss.write_index(self._index, str(directory / _INDEX_FILE))
            save_array(directory, _LABELS_FILE, self._labels)
            (directory / _QUESTIONS_FILE).write_text(json.dumps(self._questions, ensure_ascii=False), encoding="utf-8")
            return {"size": len(self._questions), "dimension": self.dimension}

    @classmethod
    def load(cls, directory: Path, state: dict[str, Any]) -> "SelfKnowledgeMemory":
        """Read a memory written by ``save``, checking the parts agree."""
        import faiss

        memory = cls(int(state.get("dimension", 0)))
        try:
            memory._index = faiss.read_index(str(directory / _INDEX_FILE))
        except RuntimeError as exc:
            raise GateLoadError(f"{directory}: file {_INDEX_FILE!r} is not a faiss index ({exc})") from None
        memory._labels = load_array(directory, _LABELS_FILE).astype(np.int8)
        try:
            memory._questions = json.loads((directory / _QUESTIONS_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise GateLoadError(f"{directory}: file {_QUESTIONS_FILE!r} is unreadable ({exc})") from None
        sizes = {
            "state.size": state.get("size"),
            _INDEX_FILE: memory._index.ntotal,
            _LABELS_FILE: len(memory._labels),
            _QUESTIONS_FILE: len(memory._questions),
        }
        if len(set(sizes.values())) != 1:
            raise GateLoadError(f"{directory}: memory parts disagree in size: {sizes}")
        if memory._index.d != memory.dimension:
            raise GateLoadError(
                f"{directory}: field 'state.dimension' is {memory.dimension} but the index has {memory._index.d}"
            )
        if not np.isin(memory._labels, (KNOWN, UNKNOWN)).all():
            raise GateLoadError(f"{directory}: file {_LABELS_FILE!r} holds labels other than 0/1")
        return memory
