"""A Milvus collection of the shape this package writes: named scalar fields beside one
``vector`` field searched by cosine similarity over an exact (FLAT) index.

``MilvusMemory`` (the SKR memory) and ``MilvusRetriever`` (the corpus) keep their rows
in such collections. The same ``pymilvus.MilvusClient`` talks to Milvus Lite's server
and to a Milvus cluster, so code written against one runs against the other. Reads ask
for strong consistency: a row one process wrote is seen by the next read of any other.
pymilvus is imported on first use (extra ``milvus``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, CollectionMismatchError
from ..models.optional import require

logger = logging.getLogger(__name__)

#: The field every collection searches by.
VECTOR_FIELD = "vector"
#: Milvus' longest VARCHAR, in bytes.
MAX_VARCHAR = 65_535
#: Rows read per request when reading a whole collection (Milvus caps one query's window).
PAGE_SIZE = 1_000

#: Milvus' error code for a collection that is not loaded.
_NOT_LOADED = 101
#: pymilvus' error code for a server it cannot connect to.
_CONNECT_FAILED = 2
_CONSISTENCY = "Strong"
_METRIC = "COSINE"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


@dataclass(frozen=True)
class Field:
    """A scalar field: its name, Milvus type name (``"INT64"``, ``"INT8"``,
    ``"VARCHAR"``), whether it is the primary key, and a VARCHAR's longest value."""

    name: str
    type: str
    primary: bool = False
    max_length: int | None = None


def milvus_client(uri_or_client: Any) -> Any:
    """The ``pymilvus.MilvusClient`` given, or a new one connected to the URI given
    (``http://host:19530``, a Milvus cluster's or Milvus Lite server's address)."""
    pymilvus = require("pymilvus", extra="milvus")
    if isinstance(uri_or_client, str):
        try:
            return pymilvus.MilvusClient(uri=uri_or_client)
        except pymilvus.MilvusException as exc:  # no server there, or a malformed address
            raise BackendUnavailableError(f"cannot connect to Milvus at {uri_or_client}: {exc.message}") from exc
    if not isinstance(uri_or_client, pymilvus.MilvusClient):
        raise TypeError(f"expected a Milvus URI or a pymilvus.MilvusClient, got {type(uri_or_client).__name__}")
    return uri_or_client


def check_varchar(field: str, value: str, what: str) -> None:
    """Refuse a text longer than a VARCHAR field holds, naming ``what`` it belongs to."""
    size = len(value.encode("utf-8"))
    if size > MAX_VARCHAR:
        raise ValueError(f"{what}: field {field!r} is {size} bytes of UTF-8, more than Milvus' {MAX_VARCHAR}")


class MilvusCollection:
    """One collection: opened (created when asked) with its schema checked, then read,
    searched and written by the calls below. The client is thread-safe, so is this."""

    def __init__(self, client: Any, name: str, fields: Sequence[Field], dimension: int) -> None:
        """Wrap a collection already checked to hold ``fields``; use ``open`` instead."""
        self.client = client
        self.name = name
        self.fields = tuple(fields)
        self.dimension = dimension

    @staticmethod
    def exists(client: Any, name: str) -> bool:
        """Whether the database holds a collection of that name."""
        return bool(client.has_collection(checked_name(name)))

    @classmethod
    def open(cls, client: Any, name: str, fields: Sequence[Field], dimension: int) -> MilvusCollection:
        """The collection ``name``, created with ``fields`` and a ``dimension``-wide
        cosine-searched vector when missing; an existing one of other fields, width or
        metric is refused (``CollectionMismatchError`` naming it). Loaded for search."""
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise ValueError(f"dimension must be a positive int, got {dimension!r}")
        collection = cls(client, checked_name(name), fields, dimension)
        if client.has_collection(name):
            collection._check_schema()
            if client.get_load_state(name)["state"].name != "Loaded":
                client.load_collection(name)  # a cluster releases collections; searches need them loaded
        else:
            collection._create()
        return collection

    def _create(self) -> None:
        pymilvus = require("pymilvus", extra="milvus")
        schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        for field in self.fields:
            extra = {} if field.max_length is None else {"max_length": field.max_length}
            schema.add_field(field.name, getattr(pymilvus.DataType, field.type), is_primary=field.primary, **extra)
        schema.add_field(VECTOR_FIELD, pymilvus.DataType.FLOAT_VECTOR, dim=self.dimension)
        index = self.client.prepare_index_params()
        index.add_index(field_name=VECTOR_FIELD, index_type="FLAT", metric_type=_METRIC)
        self.client.create_collection(self.name, schema=schema, index_params=index, consistency_level=_CONSISTENCY)
        logger.info("created Milvus collection %r (%d-d vectors, cosine)", self.name, self.dimension)

    def _check_schema(self) -> None:
        described = self.client.describe_collection(self.name)
        found = {
            f["name"]: (f["type"].name, bool(f.get("is_primary")), f.get("params", {})) for f in described["fields"]
        }
        expected = {f.name: (f.type, f.primary) for f in self.fields}
        expected[VECTOR_FIELD] = ("FLOAT_VECTOR", False)
        if {name: kind[:2] for name, kind in found.items()} != expected:
            raise CollectionMismatchError(
                f"Milvus collection {self.name!r} has the fields {_describe(found)}, expected {_describe(expected)}: "
                "it holds something else; give another collection name"
            )
        width = int(found[VECTOR_FIELD][2].get("dim", -1))
        if width != self.dimension:
            raise CollectionMismatchError(
                f"Milvus collection {self.name!r} holds {width}-d vectors, not {self.dimension}-d ones: "
                "it was filled with another encoder; give another collection name"
            )
        metrics = {
            self.client.describe_index(self.name, index).get("metric_type")
            for index in self.client.list_indexes(self.name, field_name=VECTOR_FIELD)
        }
        if metrics != {_METRIC}:
            raise CollectionMismatchError(
                f"Milvus collection {self.name!r} indexes its vectors by {sorted(map(str, metrics)) or 'nothing'}, "
                f"not by {_METRIC} alone, so its scores would not be cosine similarities"
            )

    # ------------------------------------------------------------------ reading
    def count(self, filter: str = "") -> int:
        """The rows matching ``filter`` (a Milvus boolean expression; all rows by default)."""
        rows = self._loaded(
            self.client.query, self.name, filter=filter, output_fields=["count(*)"], consistency_level=_CONSISTENCY
        )
        return int(rows[0]["count(*)"])

    def rows(self, output_fields: Sequence[str], filter: str = "") -> Iterator[dict[str, Any]]:
        """Every row matching ``filter``, ``PAGE_SIZE`` a request (an iterator, since one
        query may not reach past Milvus' window of 16,384 rows); in no set order."""
        iterator = self._loaded(
            self.client.query_iterator,
            self.name,
            batch_size=PAGE_SIZE,
            filter=filter,
            output_fields=list(output_fields),
            consistency_level=_CONSISTENCY,
        )
        try:
            while page := self._reached(iterator.next):
                yield from page
        finally:
            iterator.close()

    def search(self, vectors: np.ndarray, limit: int, output_fields: Sequence[str]) -> list[list[dict[str, Any]]]:
        """The ``limit`` rows nearest each vector, nearest first: each a dict with the
        cosine ``score`` and the ``output_fields``."""
        if not len(vectors):
            return []
        found = self._loaded(
            self.client.search,
            self.name,
            data=np.asarray(vectors, dtype=np.float32).tolist(),
            limit=limit,
            anns_field=VECTOR_FIELD,
            output_fields=list(output_fields),
            search_params={"metric_type": _METRIC},
            consistency_level=_CONSISTENCY,
        )
        return [[{**hit["entity"], "score": float(hit["distance"])} for hit in row] for row in found]

    def _loaded(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` (see ``_reached``), made again once the collection is
        loaded if the database had released it (as a restarted one does, or an operator may)."""
        pymilvus = require("pymilvus", extra="milvus")
        try:
            return self._reached(call, *args, **kwargs)
        except pymilvus.MilvusException as exc:
            if exc.code != _NOT_LOADED:
                raise
        logger.info("Milvus collection %r was released: loading it", self.name)
        self._reached(self.client.load_collection, self.name)
        return self._reached(call, *args, **kwargs)

    def _reached(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)``; a database that cannot be reached raises
        ``BackendUnavailableError`` (its address only in the log: the message may reach
        a client, in a fallback decision), so callers tell an outage from a failed call.
        The client reconnects by itself once the database is back."""
        pymilvus = require("pymilvus", extra="milvus")
        try:
            return call(*args, **kwargs)
        except pymilvus.MilvusException as exc:
            if exc.code != _CONNECT_FAILED and not isinstance(exc, pymilvus.exceptions.MilvusUnavailableException):
                raise
            logger.warning("Milvus collection %r: the database cannot be reached (%s)", self.name, exc.message)
            raise BackendUnavailableError(
                f"the Milvus database holding collection {self.name!r} cannot be reached"
            ) from exc

    # ------------------------------------------------------------------ writing
    def insert(self, rows: list[dict[str, Any]]) -> None:
        """Add rows (each with every field and its ``vector``)."""
        if rows:
            self._reached(self.client.insert, self.name, rows)

    def upsert(self, rows: list[dict[str, Any]]) -> None:
        """Write rows over those of the same primary keys (adding the others)."""
        if rows:
            self._reached(self.client.upsert, self.name, rows)

    def delete(self, ids: list[str]) -> None:
        """Remove the rows of these primary keys."""
        if ids:
            self._reached(self.client.delete, self.name, ids=ids)


def checked_name(name: object) -> str:
    """``name`` once checked to be a valid collection name (a ``ValueError`` otherwise)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"a Milvus collection name is a letter or underscore, then up to 254 letters, digits or "
            f"underscores; got {name!r}"
        )
    return name


def _describe(fields: dict[str, tuple[Any, ...]]) -> str:
    return ", ".join(f"{name} ({kind[0]}{', primary' if kind[1] else ''})" for name, kind in sorted(fields.items()))
