"""The SKR memory in Milvus, shared by every process that attaches to its collection.

The database is the source of truth: labels, question texts, sizes and counts are read
from it at each call, never cached in the process, so two ``adaptive-gates serve``
replicas over one collection decide from the same memory, a restart comes back with
it, and feedback one process writes is seen by the other. It keeps feedback verdicts
itself (a ``VerdictMemory``): a verdict relabels every stored copy of the question.

Each row: ``id`` (primary key), ``seq`` (insertion order), ``label`` (0 known, 1
unknown), ``question``, ``key`` (a hash of the question normalised as ``FeedbackLog``
keys it: questions differing only in case, punctuation or articles share it),
``given`` (the label it was added with, which a withdrawn verdict restores) and the
L2-normalised ``vector``, searched by cosine similarity over an exact (FLAT) index, so
similarities are the cosines ``FaissMemory`` gives. A collection made before ``given``
was kept is read and grown as it is, but cannot take a lesson back.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import CollectionMismatchError, GateLoadError, StoreContentError
from ..gates.base.feedback import FeedbackNotSupportedError
from ..memory.memories import _dimension, check_added, l2_normalise
from ..persistence.saved_format import config_field
from ..records.answer_metrics import normalize_answer
from ..records.selfknowledge import KNOWN, UNKNOWN
from .client import (
    MAX_VARCHAR,
    VECTOR_FIELD,
    Field,
    MilvusCollection,
    check_varchar,
    checked_name,
    milvus_client,
)

__all__ = ["MilvusMemory", "MilvusMemoryFactory", "question_key"]

logger = logging.getLogger(__name__)

_FIELDS_WITHOUT_GIVEN = (
    Field("id", "VARCHAR", primary=True, max_length=32),
    Field("seq", "INT64"),
    Field("label", "INT8"),
    Field("question", "VARCHAR", max_length=MAX_VARCHAR),
    Field("key", "VARCHAR", max_length=64),
)
_FIELDS = (*_FIELDS_WITHOUT_GIVEN, Field("given", "INT8"))


def question_key(question: str) -> str:
    """The hash a stored question is found by when judged: of its normalised form, so
    wordings differing only in case, punctuation or articles are one question."""
    return hashlib.sha256(normalize_answer(question).encode("utf-8")).hexdigest()


class MilvusMemory:
    """An ``SKRMemory`` (and ``VerdictMemory``) over a Milvus collection.

    Attaching to an existing collection takes its rows as they are (the memory another
    process wrote); a missing one is created. Use ``factory`` for a gate's ``memory=``
    (a fit into an empty collection, or a saved gate loaded back) and
    ``gate.attach_memory(MilvusMemory(...))`` to move a fitted gate onto it.

    Args:
        uri_or_client: the database's URI (``http://host:19530``) or a
            ``pymilvus.MilvusClient``; a Milvus Lite server and a Milvus cluster alike.
        collection: the collection holding this memory's questions only.
        dimension: the width of the gate's embeddings; an existing collection of
            another width or schema is refused (``CollectionMismatchError``).
    """

    kind: ClassVar[str] = "milvus"
    #: Its stored labels carry the feedback verdicts (see ``set_verdict``).
    keeps_verdicts: bool = True

    def __init__(self, uri_or_client: Any, collection: str, dimension: int) -> None:
        client = milvus_client(uri_or_client)
        try:
            self._collection = MilvusCollection.open(client, collection, _FIELDS, dimension)
        except CollectionMismatchError as mismatch:
            try:  # a collection made before each row kept the label it was given
                self._collection = MilvusCollection.open(client, collection, _FIELDS_WITHOUT_GIVEN, dimension)
            except CollectionMismatchError:
                raise mismatch from None
        self._row_fields = (*(f.name for f in self._collection.fields), VECTOR_FIELD)
        self._seq_lock = threading.Lock()
        self._last_seq = 0

    @classmethod
    def factory(cls, uri_or_client: Any, collection: str) -> MilvusMemoryFactory:
        """What ``SKRKnnGate(memory=...)`` takes: the embedding dimension -> a memory over
        ``collection`` (created, or refused when it already holds rows); its ``load``
        re-attaches a gate saved over the collection."""
        return MilvusMemoryFactory(uri_or_client, collection)

    @property
    def collection(self) -> str:
        """The name of the collection the rows are in."""
        return self._collection.name

    @property
    def dimension(self) -> int:
        return self._collection.dimension

    def __len__(self) -> int:
        return self._collection.count()

    @property
    def counts(self) -> tuple[int, int]:
        """``(m, n)``: the known and unknown questions the database holds now."""
        return self._collection.count(f"label == {KNOWN}"), self._collection.count(f"label == {UNKNOWN}")

    def add(self, vectors: np.ndarray, labels: Sequence[int], questions: Sequence[str]) -> None:
        new_labels = check_added(vectors, labels, questions, self.dimension)
        for question in questions:
            check_varchar("question", question, f"question {question[:60]!r}")
        normalised = l2_normalise(vectors)
        rows = [
            {
                "id": uuid.uuid4().hex,
                "seq": seq,
                "label": int(label),
                "question": question,
                "key": question_key(question),
                "given": int(label),
                VECTOR_FIELD: vector.tolist(),
            }
            for seq, label, question, vector in zip(self._next_seqs(len(questions)), new_labels, questions, normalised)
        ]
        if not self._keeps_given:
            for row in rows:
                del row["given"]
        self._collection.insert(rows)

    def _next_seqs(self, count: int) -> range:
        """Increasing sequence numbers for ``count`` new rows: nanoseconds of the clock,
        so rows of processes on one machine (or synchronised clocks) sort as added."""
        with self._seq_lock:
            start = max(time.time_ns(), self._last_seq + 1)
            self._last_seq = start + count - 1
        return range(start, start + count)

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        """The nearest stored questions, each row's label and text read from the database."""
        queries = l2_normalise(vectors)
        found = self._collection.search(queries, k, ("label", "question"))
        # Every query sees the same rows; the shortest row guards against a torn read.
        width = min((len(row) for row in found), default=0)
        rows = [row[:width] for row in found]
        sims = np.array([[hit["score"] for hit in row] for row in rows], dtype=np.float32).reshape(len(queries), width)
        labels = np.array([[hit["label"] for hit in row] for row in rows], dtype=np.int8).reshape(len(queries), width)
        return sims, labels, [[hit["question"] for hit in row] for row in rows]

    @property
    def _keeps_given(self) -> bool:
        return "given" in self._row_fields

    def entries(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every row in insertion order: normalised vectors, labels, questions."""
        rows = sorted(self._collection.rows(self._row_fields), key=lambda row: (row["seq"], row["id"]))
        vectors = np.array([row[VECTOR_FIELD] for row in rows], dtype=np.float32).reshape(len(rows), self.dimension)
        labels = np.array([row["label"] for row in rows], dtype=np.int8)
        return vectors, labels, [row["question"] for row in rows]

    def set_verdict(self, question: str, label: int | None) -> None:
        """Relabel every stored copy of ``question`` (by its ``question_key``) to ``label``;
        ``None`` gives each copy back the label it was added with."""
        if label is None:
            self._check_keeps_given()
        elif isinstance(label, bool) or label not in (KNOWN, UNKNOWN):
            raise ValueError(f"a verdict is 0 (known) or 1 (unknown), got {label!r}")
        relabelled = []
        for row in self._copies(question):
            wanted = row["given"] if label is None else label
            if row["label"] != wanted:
                relabelled.append({**row, "label": wanted})
        self._collection.upsert(relabelled)
        logger.debug("verdict %s on %r: %d stored copies relabelled", label, question, len(relabelled))

    def remove_copy(self, question: str, label: int) -> bool:
        """Delete the latest added copy of ``question`` that was added with ``label``."""
        self._check_keeps_given()
        copies = [row for row in self._copies(question) if row["question"] == question and row["given"] == label]
        if not copies:
            return False
        latest = max(copies, key=lambda row: (row["seq"], row["id"]))
        self._collection.delete([latest["id"]])
        return True

    def _copies(self, question: str) -> list[dict[str, Any]]:
        """Every stored row of ``question`` or a wording with the same key."""
        return list(self._collection.rows(self._row_fields, filter=f'key == "{question_key(question)}"'))

    def _check_keeps_given(self) -> None:
        if not self._keeps_given:
            raise FeedbackNotSupportedError(
                f"Milvus collection {self.collection!r} was made before each row kept the label it was added with, "
                "so a lesson cannot be taken back from it; fit into a new collection to have that"
            )

    def save(self, directory: Path) -> dict[str, Any]:
        """The memory's identity, not its rows (the database keeps them): the collection,
        the vector width and the number of rows now."""
        return {"collection": self.collection, "dimension": self.dimension, "size": len(self)}

    def __repr__(self) -> str:
        return f"MilvusMemory(collection={self.collection!r}, dimension={self.dimension})"


class MilvusMemoryFactory:
    """A gate's ``memory=`` for ``MilvusMemory`` (``MilvusMemory.factory`` makes one).

    Called with the embedding dimension, it opens (or creates) the collection and
    refuses one that already holds rows: a fit fills an empty memory, and rows left by
    an earlier fit or another gate would join its neighbours unasked. ``load`` brings
    back a gate saved over the collection. It connects on first use, once.
    """

    kind: ClassVar[str] = MilvusMemory.kind

    def __init__(self, uri_or_client: Any, collection: str) -> None:
        self.uri_or_client = uri_or_client
        self.collection = checked_name(collection)
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The database client (connected on the first call)."""
        with self._lock:
            if self._client is None:
                self._client = milvus_client(self.uri_or_client)
            return self._client

    def __call__(self, dimension: int) -> MilvusMemory:
        memory = MilvusMemory(self.client(), self.collection, dimension)
        rows = len(memory)
        if rows:
            raise StoreContentError(
                f"Milvus collection {self.collection!r} already holds {rows} rows: a fit needs an empty collection "
                "of its own. Give another collection name; to use the rows there, attach the fitted gate with "
                f"gate.attach_memory(MilvusMemory(uri, {self.collection!r}, dimension)), or load the gate saved over "
                "it with SKRKnnGate.load(path, memory=MilvusMemory.factory(uri, collection))"
            )
        return memory

    def load(self, directory: Path, state: dict[str, Any]) -> MilvusMemory:
        """The memory a gate saved into ``directory`` was over, re-attached; refused
        (``GateLoadError``) when the collection is another one, missing, of another
        width, or empty although the gate was saved with rows (rows leave it only
        when a lesson is taken back)."""
        dimension = _dimension(directory, state)
        saved = config_field(state, "collection", str, within="state")
        size = config_field(state, "size", int, within="state")
        if saved != self.collection:
            raise GateLoadError(
                f"{directory}: field 'state.collection' is {saved!r} but the memory given attaches "
                f"{self.collection!r}; pass MilvusMemory.factory(uri, {saved!r})"
            )
        client = self.client()
        if not MilvusCollection.exists(client, saved):
            raise GateLoadError(
                f"{directory}: the gate was saved over Milvus collection {saved!r}, which the database does not hold"
            )
        try:
            memory = MilvusMemory(client, saved, dimension)
        except CollectionMismatchError as exc:
            raise GateLoadError(f"{directory}: {exc}") from None
        rows = len(memory)
        if size and not rows:
            raise GateLoadError(
                f"{directory}: field 'state.size' is {size} but Milvus collection {saved!r} is empty, "
                "so it is not the collection the gate was saved over"
            )
        logger.info("SKR memory re-attached to Milvus collection %r (%d rows, %d when saved)", saved, rows, size)
        return memory

    def __repr__(self) -> str:
        return f"MilvusMemory.factory(collection={self.collection!r})"
