"""IAPEK-BM25: the lexical baseline of the Thrust paper (Zhao et al., NeurIPS 2023).

A query that shares many (rare) words with the task's fitting queries looks familiar;
one that shares few looks hard, so it retrieves. No model is needed: BM25 over the
fitting queries themselves.

Familiarity (our precise form; the paper only says "BM25 relevance to the fitting
queries"): the mean of the query's ``top_k`` highest BM25 scores against the fitting
queries, a missing match counting 0 (``top_k=None``: the mean over all of them). The
top-k mean keeps a few close matches from being drowned by hundreds of unrelated
queries. Need score: ``−familiarity``. Thresholds as for Thrust: percentiles of the
fitting queries' own scores, cross-fitted: each fold is scored against an index of the
other folds. In-sample, a query would match itself best and every fitting query would
look familiar. Measured on AdaRAGUE gates fitted on 400 questions: leave-one-out on
the full index (which still counts the query in the term statistics) let 3-5 points
fewer new queries retrieve than each level states; cross-fitted, 2-3 points with
``top_k=10`` (a larger index offers closer matches) and under 1 point over all.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..data import CorpusRecord
from ..errors import GateLoadError, NotFittedError
from ..persistence import read_json_object, save_array
from ..validation import check_questions
from .fit_percentile import FitPercentileGate, cross_fit

if TYPE_CHECKING:  # bm25s is imported on first fit, not with the package
    from ..retrieval.base import Hit
    from ..retrieval.bm25 import BM25Retriever

logger = logging.getLogger(__name__)

_QUERIES_FILE = "queries.json"
#: The stop words dropped before indexing (bm25s's English list).
_STOPWORDS = "en"
#: Seed of the cross-fitting folds.
_FOLD_SEED = 0
#: Closest fitting queries shown in a decision's details.
_SHOWN_MATCHES = 3


class BM25DifficultyGate(FitPercentileGate):
    """Retrieve when a query has little BM25 overlap with the fitting queries.

    Args:
        top_k: how many best-matching fitting queries are averaged (default 10);
            ``None`` averages over all fitting queries.
        fallback_retrieve: the decision taken when a question fails.
    """

    name = "bm25-difficulty"
    _fitted_state = ("_fit_scores", "_index", "_queries")

    def __init__(self, *, top_k: int | None = 10, fallback_retrieve: bool = True) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
        self.top_k = top_k
        self._index: BM25Retriever | None = None
        self._queries: list[str] | None = None

    @property
    def is_fitted(self) -> bool:
        return self._index is not None and super().is_fitted

    @property
    def queries_(self) -> list[str]:
        """The fitting queries the BM25 index is built over."""
        self._check_fitted()
        return list(self._queries)

    def fit(self, questions: Sequence[str]) -> "BM25DifficultyGate":
        """Index the fitting queries (no answers needed)."""
        clean = check_questions(questions)
        if not clean:
            raise ValueError("bm25-difficulty needs at least one fitting question")
        index = _build_index(clean)
        if index is None:
            raise ValueError(
                f"bm25-difficulty: none of the {len(clean)} fitting questions has a word BM25 can index "
                f"(stop words and one-letter words are dropped), e.g. {clean[0]!r}; fit on questions with content words"
            )
        if len(clean) == 1:  # nothing to compare a single query with
            fit_scores = np.zeros(1)
        else:

            def score_fold(kept: np.ndarray, held_out: np.ndarray) -> np.ndarray:
                fold_index = _build_index([clean[i] for i in kept])
                return -self._familiarity(fold_index, len(kept), [clean[i] for i in held_out])[0]

            fit_scores = cross_fit(len(clean), _FOLD_SEED, score_fold)
        self._index, self._queries, self._fit_scores = index, clean, fit_scores
        logger.info("bm25-difficulty fitted on %d questions", len(clean))
        return self

    def _familiarity(
        self, index: BM25Retriever | None, n_indexed: int, questions: list[str]
    ) -> tuple[np.ndarray, list[list[Hit]], int]:
        """Mean of each question's top-k scores (absent matches count 0), its hits, and k.
        No index (fitting queries of stop words only) matches nothing."""
        k = n_indexed if self.top_k is None else min(self.top_k, n_indexed)
        hits = index.search_batch(questions, k=k) if index is not None else [[] for _ in questions]
        return np.array([sum(h.score for h in row) / k for row in hits], dtype=np.float64), hits, k

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        if self._index is None:
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit() or load() first")
        familiarity, hits, k = self._familiarity(self._index, len(self._queries), questions)
        details = [
            {
                "familiarity": float(f),
                "top_k": k,
                "matches": [{"question": h.text, "score": h.score} for h in row[:_SHOWN_MATCHES]],
            }
            for f, row in zip(familiarity, hits)
        ]
        return -familiarity, details

    def _save_state(self, directory: Path) -> dict[str, Any]:
        payload = {"queries": self.queries_}
        (directory / _QUERIES_FILE).write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        save_array(directory, "fit_scores.npy", self.fit_scores_)
        return {"n_queries": len(self._queries)}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        queries = read_json_object(directory / _QUERIES_FILE).get("queries")
        if not isinstance(queries, list) or not queries or not all(isinstance(q, str) and q.strip() for q in queries):
            raise GateLoadError(f"{directory}: file {_QUERIES_FILE!r} must hold a non-empty list of questions")
        if state.get("n_queries") != len(queries):
            raise GateLoadError(
                f"{directory}: field 'state.n_queries' is {state.get('n_queries')!r} "
                f"but {_QUERIES_FILE!r} holds {len(queries)} questions"
            )
        self._fit_scores = self._load_fit_scores(directory, len(queries))
        index = _build_index(queries)  # indexing takes milliseconds
        if index is None:
            raise GateLoadError(f"{directory}: file {_QUERIES_FILE!r} holds no word BM25 can index")
        self._index, self._queries = index, queries


def _build_index(queries: list[str]) -> BM25Retriever | None:
    """A BM25 index over queries (the project's retriever: English stop words, stemming),
    or ``None`` when no query keeps a word once stop words are dropped (BM25 cannot
    index an empty vocabulary)."""
    import bm25s

    from ..retrieval.bm25 import BM25Retriever

    tokens = bm25s.tokenize(queries, stopwords=_STOPWORDS, return_ids=False, show_progress=False)
    if not any(tokens):
        return None
    records = [CorpusRecord(str(i), "", q) for i, q in enumerate(queries)]
    return BM25Retriever.from_records(records, stopwords=_STOPWORDS)
