"""Dense retrieval: exact inner-product search (faiss ``IndexFlatIP``) over unit-length embeddings.

Vectors are L2-normalised here, whatever the embedder promises, so scores are
cosine similarities in [-1, 1]. Saved directories hold faiss's own index file,
never a pickle, and remember the embedder's ``model_id`` and ``dimension`` so an
index is never queried with vectors from another encoder.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np

from ..errors import BackendError, GateLoadError
from ..memory.faiss_index import write_index
from ..memory.memories import check_index_rows
from ..models.protocols import Embedder
from ..persistence.directory_swap import reading
from ..records.data import CorpusRecord, load_corpus
from ..records.validation import check_question, check_questions
from .base import (
    CONFIG_FILE,
    Hit,
    check_k,
    config_int,
    make_hit,
    passage_text,
    read_config,
    read_corpus,
    require_file,
    save_corpus,
    save_retriever,
)

__all__ = ["DenseRetriever"]

logger = logging.getLogger(__name__)

_TYPE = "dense"
INDEX_FILE = "index.faiss"


def unit_vectors(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed ``texts`` and return C-contiguous float32 rows of unit length; a
    ``BackendError`` names the embedder when its output is unusable."""
    try:
        vectors = np.asarray(embedder.embed(list(texts)), dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise BackendError(f"embedder {embedder.model_id!r} returned unusable output ({exc})") from exc
    expected = (len(texts), embedder.dimension)
    if vectors.shape != expected:
        raise BackendError(f"embedder {embedder.model_id!r} returned shape {vectors.shape}, expected {expected}")
    if not np.isfinite(vectors).all():
        raise BackendError(f"embedder {embedder.model_id!r} returned non-finite values")
    vectors = np.ascontiguousarray(vectors)
    faiss.normalize_L2(vectors)
    return vectors


class DenseRetriever:
    """Cosine-similarity search over passage embeddings (``"title: text"``).

    faiss searches on a flat index are read-only and thread-safe; concurrent
    searches are as thread-safe as the embedder's ``embed``.
    """

    def __init__(self, embedder: Embedder, index: faiss.Index, records: Sequence[CorpusRecord]) -> None:
        """Wrap a built index; use ``from_records``/``from_jsonl``/``load`` instead."""
        records = list(records)
        if index.ntotal != len(records):
            raise ValueError(f"index holds {index.ntotal} vectors for {len(records)} passages")
        self._embedder = embedder
        self._index = index
        self._records = records

    @classmethod
    def from_records(cls, records: Sequence[CorpusRecord], embedder: Embedder, batch_size: int = 256) -> DenseRetriever:
        """Embed ``records`` ``batch_size`` at a time into a new flat inner-product index."""
        records = list(records)
        if not records:
            raise ValueError("cannot build a dense index over an empty corpus")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        index = faiss.IndexFlatIP(embedder.dimension)
        for start in range(0, len(records), batch_size):
            batch = records[start : start + batch_size]
            index.add(unit_vectors(embedder, [passage_text(r.title, r.text) for r in batch]))
        logger.info("dense index: %d passages embedded with %s", len(records), embedder.model_id)
        return cls(embedder, index, records)

    @classmethod
    def from_jsonl(cls, path: str | Path, embedder: Embedder, batch_size: int = 256) -> DenseRetriever:
        """Index a corpus JSONL file (``id, title, text``)."""
        return cls.from_records(load_corpus(path), embedder, batch_size=batch_size)

    def __len__(self) -> int:
        return len(self._records)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The ``k`` passages most similar to ``query`` (clipped to the corpus size), best first."""
        return self._search([check_question(query)], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """``search`` for each query, embedding all of them in one call."""
        return self._search(check_questions(queries), k)

    def _search(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = check_k(k, len(self._records))
        if not queries:
            return []
        scores, ids = self._index.search(unit_vectors(self._embedder, queries), k)
        return [
            [make_hit(self._records[int(i)], s) for i, s in zip(id_row, score_row) if i >= 0]
            for id_row, score_row in zip(ids, scores)
        ]

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Save ``config.json``, ``index.faiss`` and ``corpus.jsonl`` as the directory
        ``path`` (``overwrite``: replacing a saved retriever there)."""
        path = save_retriever(
            path,
            {
                "type": _TYPE,
                "model_id": self._embedder.model_id,
                "dimension": self._index.d,
                "count": len(self._records),
                "versions": {"faiss": faiss.__version__, "numpy": np.__version__},
            },
            self._write_files,
            overwrite=overwrite,
        )
        logger.info("saved dense retriever (%d passages) to %s", len(self), path)
        return path

    def _write_files(self, directory: Path) -> None:
        write_index(self._index, directory / INDEX_FILE)
        save_corpus(directory, self._records)

    @classmethod
    def load(cls, directory: str | Path, embedder: Embedder) -> DenseRetriever:
        """Load a directory written by ``save``, refusing files or an embedder that do not match.

        ``GateLoadError`` names the missing file or the mismatched field
        (``model_id``, ``dimension``, ``ntotal``, ``count``).
        """
        directory = Path(directory)
        with reading(directory):  # no save swaps the directory while its files are read
            return cls._load_read(directory, embedder)

    @classmethod
    def _load_read(cls, directory: Path, embedder: Embedder) -> DenseRetriever:
        """``load`` of a directory no save swaps meanwhile."""
        config = read_config(directory, _TYPE)
        config_path = directory / CONFIG_FILE
        if config.get("model_id") != embedder.model_id:
            raise GateLoadError(
                f"{config_path}: field 'model_id' is {config.get('model_id')!r} but the "
                f"embedder is {embedder.model_id!r}"
            )
        dimension = config_int(config, directory, "dimension")
        if dimension != embedder.dimension:
            raise GateLoadError(
                f"{config_path}: field 'dimension' is {dimension} but the embedder "
                f"{embedder.model_id!r} gives {embedder.dimension}"
            )
        count = config_int(config, directory, "count")
        index_path = require_file(directory, INDEX_FILE)
        try:
            index = faiss.read_index(str(index_path))
        except RuntimeError as exc:
            raise GateLoadError(f"{index_path}: not a readable faiss index ({exc})") from None
        if index.d != dimension:
            raise GateLoadError(f"{index_path}: index 'dimension' is {index.d} but config.json says {dimension}")
        if index.ntotal != count:
            raise GateLoadError(
                f"{index_path}: index 'ntotal' is {index.ntotal} but config.json field 'count' is {count}"
            )
        check_index_rows(directory, INDEX_FILE, index)  # searched by inner product as cosine
        records = read_corpus(directory, count)
        logger.info("loaded dense retriever (%d passages) from %s", count, directory)
        return cls(embedder, index, records)
