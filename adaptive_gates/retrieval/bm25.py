"""Sparse lexical retrieval with BM25, built on the ``bm25s`` library.

Title and text are indexed together. ``bm25s`` saves its index as ``.npy`` arrays
(written and read with ``allow_pickle=False``) plus JSON files, so a saved
directory can be loaded without unpickling anything.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GateLoadError
from ..persistence.directory_swap import reading
from ..persistence.saved_format import load_array, read_json_file
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

if TYPE_CHECKING:  # bm25s, and the scipy it loads, are imported on first use, not with the package
    import bm25s

__all__ = ["BM25Retriever"]

logger = logging.getLogger(__name__)

_TYPE = "bm25"
#: The files ``bm25s.BM25.save`` writes when no corpus is passed to it.
_BM25S_FILES = (
    "data.csc.index.npy",
    "indices.csc.index.npy",
    "indptr.csc.index.npy",
    "vocab.index.json",
    "params.index.json",
)
_STEMMER_NAME = "pystemmer-english"


def _english_stemmer() -> Any | None:
    """PyStemmer's English (Snowball) stemmer, or ``None`` when PyStemmer is not installed."""
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        return None
    return Stemmer.Stemmer("english")


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import bm25s

    versions = {"bm25s": bm25s.__version__, "numpy": np.__version__}
    with contextlib.suppress(PackageNotFoundError):
        versions["PyStemmer"] = version("PyStemmer")
    return versions


class BM25Retriever:
    """BM25 (Lucene variant) over ``title + text``; scores are BM25 sums, 0 means no overlap.

    Searching is serialised by a lock: ``bm25s`` scoring only reads the index, but
    PyStemmer stemmer objects are not safe to share between threads.
    """

    def __init__(
        self,
        model: bm25s.BM25,
        records: Sequence[CorpusRecord],
        *,
        stopwords: str | list[str] | None,
        stemmer: Any | None,
    ) -> None:
        """Wrap an indexed ``bm25s.BM25``; use ``from_records``/``from_jsonl``/``load`` instead."""
        self._model = model
        self._records = list(records)
        self._stopwords = stopwords
        self._stemmer = stemmer
        self._lock = threading.Lock()

    @classmethod
    def from_records(
        cls,
        records: Sequence[CorpusRecord],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        stopwords: str | list[str] | None = "en",
        stemmer: bool = True,
    ) -> BM25Retriever:
        """Index ``records``; ``stemmer=True`` stems with PyStemmer when it is installed.

        Raises:
            ValueError: ``records`` is empty, or no passage holds a word to index (only
                punctuation, single letters or stopwords).
        """
        import bm25s

        records = list(records)
        if not records:
            raise ValueError("cannot build a BM25 index over an empty corpus")
        stemmer_obj = _english_stemmer() if stemmer else None
        if stemmer and stemmer_obj is None:
            logger.warning("PyStemmer is not installed; indexing BM25 without stemming")
        tokens = bm25s.tokenize(
            [passage_text(r.title, r.text) for r in records],
            stopwords=stopwords,
            stemmer=stemmer_obj,
            return_ids=False,
            show_progress=False,
        )
        if not any(tokens):  # bm25s would fail on its own words ("max() arg is an empty sequence")
            kept = " and stopwords left out (stopwords=None keeps them)" if stopwords else ""
            raise ValueError(
                f"cannot build a BM25 index: none of the {len(records)} passages holds a word to index "
                f"(words are runs of two or more letters or digits{kept})"
            )
        model = bm25s.BM25(k1=k1, b=b)
        model.index(tokens, show_progress=False)
        logger.info(
            "BM25 index: %d passages, %d terms, stemming %s",
            len(records),
            len(model.vocab_dict),
            "on" if stemmer_obj else "off",
        )
        return cls(model, records, stopwords=stopwords, stemmer=stemmer_obj)

    @classmethod
    def from_jsonl(cls, path: str | Path, **params: Any) -> BM25Retriever:
        """Index a corpus JSONL file (``id, title, text``); ``params`` go to ``from_records``."""
        return cls.from_records(load_corpus(path), **params)

    def __len__(self) -> int:
        return len(self._records)

    def _query_tokens(self, queries: list[str], distinct: bool) -> list[list[str]]:
        """Tokenise like the corpus, keeping only terms the index knows (each once
        when ``distinct``)."""
        import bm25s

        tokenized = bm25s.tokenize(
            queries,
            stopwords=self._stopwords,
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=False,
        )
        vocab = self._model.vocab_dict
        known = [[t for t in tokens if t and t in vocab] for tokens in tokenized]
        return [list(dict.fromkeys(tokens)) for tokens in known] if distinct else known

    def search(self, query: str, k: int = 3, *, distinct_terms: bool = False) -> list[Hit]:
        """The up-to-``k`` passages sharing terms with ``query``, best first.

        BM25 sums a term's weight once per occurrence in the query; with
        ``distinct_terms`` a repeated query word counts once, so padding a query with
        one word repeated cannot inflate its scores.
        """
        return self._search([check_question(query)], k, distinct_terms)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3, *, distinct_terms: bool = False) -> list[list[Hit]]:
        """``search`` for each query, scored in one ``bm25s`` call."""
        return self._search(check_questions(queries), k, distinct_terms)

    def _search(self, queries: list[str], k: int, distinct_terms: bool) -> list[list[Hit]]:
        k = check_k(k, len(self._records))
        results: list[list[Hit]] = [[] for _ in queries]
        with self._lock:
            tokens = self._query_tokens(queries, distinct_terms)
            # A query with no known term would score every passage 0: it has no hits.
            live = [i for i, t in enumerate(tokens) if t]
            if not live:
                return results
            docs, scores = self._model.retrieve([tokens[i] for i in live], k=k, show_progress=False)
        for row, i in enumerate(live):
            results[i] = [make_hit(self._records[int(d)], s) for d, s in zip(docs[row], scores[row]) if s > 0]
        return results

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Save ``config.json``, the ``bm25s`` index files and ``corpus.jsonl`` as the
        directory ``path`` (``overwrite``: replacing a saved retriever there)."""
        path = save_retriever(
            path,
            {
                "type": _TYPE,
                "params": {
                    "k1": self._model.k1,
                    "b": self._model.b,
                    "method": self._model.method,
                    "stopwords": self._stopwords,
                    "stemmer": _STEMMER_NAME if self._stemmer is not None else None,
                },
                "count": len(self._records),
                "versions": _versions(),
            },
            self._write_files,
            overwrite=overwrite,
        )
        logger.info("saved BM25 retriever (%d passages) to %s", len(self), path)
        return path

    def _write_files(self, directory: Path) -> None:
        self._model.save(directory, show_progress=False)
        save_corpus(directory, self._records)

    @classmethod
    def load(cls, directory: str | Path) -> BM25Retriever:
        """Load a directory written by ``save``; ``GateLoadError`` names any missing or bad file."""
        directory = Path(directory)
        with reading(directory):  # no save swaps the directory while its files are read
            return cls._load_read(directory)

    @classmethod
    def _load_read(cls, directory: Path) -> BM25Retriever:
        """``load`` of a directory no save swaps meanwhile."""
        import bm25s

        config = read_config(directory, _TYPE)
        config_path = directory / CONFIG_FILE
        params = config.get("params")
        if not isinstance(params, dict):
            raise GateLoadError(f"{config_path}: field 'params' must be an object")
        stopwords = params.get("stopwords")
        if not (
            stopwords is None
            or isinstance(stopwords, str)
            or (isinstance(stopwords, list) and all(isinstance(w, str) for w in stopwords))
        ):
            raise GateLoadError(f"{config_path}: field 'stopwords' must be a string or a list")
        stemmer_name = params.get("stemmer")
        if stemmer_name not in (None, _STEMMER_NAME):
            raise GateLoadError(f"{config_path}: unknown field 'stemmer' value {stemmer_name!r}")
        stemmer = _english_stemmer() if stemmer_name else None
        if stemmer_name and stemmer is None:
            raise GateLoadError(
                f"{config_path}: field 'stemmer' says the index was stemmed with PyStemmer, "
                "which is not installed; queries would not match the index terms"
            )
        count = config_int(config, directory, "count")
        for name in _BM25S_FILES:
            require_file(directory, name)
            # checked as every saved file is (a lying .npy header, nesting too deep)
            # before bm25s reads it with its own, less wary, readers
            if name.endswith(".npy"):
                load_array(directory, name, ndim=1)
            else:
                read_json_file(directory, name)
        try:
            model = bm25s.BM25.load(directory, allow_pickle=False, show_progress=False)
        except (OSError, ValueError, TypeError, KeyError, IndexError, EOFError) as exc:
            raise GateLoadError(f"{directory}: the bm25s index files are unreadable ({exc})") from None
        num_docs = model.scores.get("num_docs")
        if num_docs != count:
            raise GateLoadError(
                f"{directory / 'params.index.json'}: field 'num_docs' is {num_docs!r} "
                f"but config.json field 'count' is {count}"
            )
        records = read_corpus(directory, count)
        logger.info("loaded BM25 retriever (%d passages) from %s", count, directory)
        return cls(model, records, stopwords=stopwords, stemmer=stemmer)
