"""Dense retrieval over a corpus kept in a Milvus collection.

The passages live in the database with their embeddings (``"title: text"``, as
``DenseRetriever`` embeds them), searched by cosine similarity over an exact (FLAT)
index, so a second process, a restart or another replica reuses the index instead of
embedding the corpus again. Each row: ``id`` (the record's, primary key), ``title``,
``text`` and the L2-normalised ``vector``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CollectionMismatchError
from ..models.protocols import Embedder
from ..records.data import CorpusRecord, load_corpus
from ..records.validation import check_question, check_questions
from ..retrieval.base import Hit, check_k, make_hit, passage_text
from ..retrieval.dense import unit_vectors
from .client import MAX_VARCHAR, VECTOR_FIELD, Field, MilvusCollection, check_varchar, milvus_client

__all__ = ["MilvusRetriever"]

logger = logging.getLogger(__name__)

#: A record id's longest form, in bytes.
MAX_ID = 512

_FIELDS = (
    Field("id", "VARCHAR", primary=True, max_length=MAX_ID),
    Field("title", "VARCHAR", max_length=MAX_VARCHAR),
    Field("text", "VARCHAR", max_length=MAX_VARCHAR),
)


class MilvusRetriever:
    """Cosine-similarity search over passage embeddings stored in Milvus.

    ``from_records`` (or ``from_jsonl``) indexes a corpus into a collection, or reuses
    the collection when it already holds those records; the constructor attaches to a
    collection indexed before. Searches are as thread-safe as the embedder's ``embed``.

    Args:
        uri_or_client: the database's URI (``http://host:19530``) or a
            ``pymilvus.MilvusClient``; a Milvus Lite server and a Milvus cluster alike.
        collection: the collection holding the corpus.
        embedder: the encoder the corpus was indexed with.
    """

    def __init__(self, uri_or_client: Any, collection: str, embedder: Embedder) -> None:
        client = milvus_client(uri_or_client)
        if not MilvusCollection.exists(client, collection):
            raise CollectionMismatchError(
                f"Milvus collection {collection!r} does not exist: index the corpus into it with "
                "MilvusRetriever.from_records(records, embedder, uri, collection)"
            )
        self._collection = MilvusCollection.open(client, collection, _FIELDS, embedder.dimension)
        self._embedder = embedder
        self._size = self._collection.count()
        if not self._size:
            raise CollectionMismatchError(f"Milvus collection {collection!r} holds no passages")

    @classmethod
    def from_records(
        cls,
        records: Sequence[CorpusRecord],
        embedder: Embedder,
        uri_or_client: Any,
        collection: str,
        *,
        batch_size: int = 256,
        progress: bool = True,
    ) -> MilvusRetriever:
        """The retriever over ``records`` in ``collection``: indexed there, ``batch_size``
        passages an embedding call, when the collection is missing or empty; reused when
        it holds exactly those record ids. A collection holding other records is refused
        (``CollectionMismatchError``); one holding some of them (an indexing cut short)
        gets the rest. Writes replace rows by id, so processes indexing at once agree."""
        records = list(records)
        if not records:
            raise ValueError("cannot index an empty corpus")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        for record in records:
            check_varchar("id", record.id, f"corpus record {record.id[:60]!r}")
            check_varchar("title", record.title, f"corpus record {record.id!r}")
            check_varchar("text", record.text, f"corpus record {record.id!r}")
        wanted = {r.id for r in records}
        if len(wanted) != len(records):
            raise ValueError(f"the corpus repeats record ids: {len(records)} records, {len(wanted)} distinct ids")
        store = MilvusCollection.open(milvus_client(uri_or_client), collection, _FIELDS, embedder.dimension)
        present = {row["id"] for row in store.rows(["id"])}
        foreign = present - wanted
        if foreign:
            raise CollectionMismatchError(
                f"Milvus collection {collection!r} holds {len(foreign)} records not in this corpus "
                f"(e.g. {sorted(foreign)[0]!r}): it indexes another corpus; give another collection name"
            )
        missing = [r for r in records if r.id not in present]
        if missing:
            _index(store, missing, embedder, batch_size, progress)
        else:
            logger.info("Milvus collection %r already indexes the %d passages: reused", collection, len(records))
        return cls(store.client, collection, embedder)

    @classmethod
    def from_jsonl(
        cls, path: str | Path, embedder: Embedder, uri_or_client: Any, collection: str, **options: Any
    ) -> MilvusRetriever:
        """``from_records`` over a corpus JSONL file (``id, title, text``)."""
        return cls.from_records(load_corpus(path), embedder, uri_or_client, collection, **options)

    @property
    def collection(self) -> str:
        """The name of the collection the corpus is in."""
        return self._collection.name

    def __len__(self) -> int:
        return self._size

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The ``k`` passages most similar to ``query`` (clipped to the corpus size), best first."""
        return self._search([check_question(query)], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """``search`` for each query, embedding all of them in one call."""
        return self._search(check_questions(queries), k)

    def _search(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = check_k(k, self._size)
        if not queries:
            return []
        found = self._collection.search(unit_vectors(self._embedder, queries), k, ("id", "title", "text"))
        return [[make_hit(CorpusRecord(h["id"], h["title"], h["text"]), h["score"]) for h in row] for row in found]


def _index(
    store: MilvusCollection, records: list[CorpusRecord], embedder: Embedder, batch_size: int, progress: bool
) -> None:
    """Embed and write ``records`` into ``store``, a batch at a time."""
    from tqdm.auto import tqdm

    with tqdm(total=len(records), desc=f"indexing {store.name}", unit="passage", disable=not progress) as bar:
        for start in range(0, len(records), batch_size):
            batch = records[start : start + batch_size]
            vectors = unit_vectors(embedder, [passage_text(r.title, r.text) for r in batch])
            store.upsert(
                [
                    {"id": r.id, "title": r.title, "text": r.text, VECTOR_FIELD: vector.tolist()}
                    for r, vector in zip(batch, vectors)
                ]
            )
            bar.update(len(batch))
    logger.info("Milvus collection %r: %d passages embedded with %s", store.name, len(records), embedder.model_id)
