"""IAPEK-BM25: the lexical baseline of the Thrust paper (Zhao et al., NeurIPS 2023).

A query that shares many (rare) words with the task's fitting queries looks familiar;
one that shares few looks hard, so it retrieves. No model is needed: BM25 over the
fitting queries themselves.

Familiarity (our precise form; the paper only says "BM25 relevance to the fitting
queries"): the mean of the query's ``top_k`` highest BM25 scores against the fitting
queries, a missing match counting 0 (``top_k=None``: the mean over all of them). The
top-k mean keeps a few close matches from being drowned by hundreds of unrelated
queries. Only content words count, each once however often it is repeated: BM25 adds
a word's weight per repeat, and bm25s's 33 English stop words leave "who", "what" or
"please" in, so "who" written 200 times made any question look familiar and one
filler word could tip a close one. The index drops scikit-learn's English stop words
too (the list ``word_rarity`` uses) and a query's repeated terms count once (this
package's rule; gates saved before it keep the terms they were fitted with, bm25s's
list and repeats counted, so their saved scores are read as they were made). Need
score: ``−familiarity``. Thresholds as for Thrust: percentiles of the
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
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

import numpy as np

from ..errors import GateLoadError
from ..persistence.saved_format import read_json_object, save_array
from ..records.data import CorpusRecord
from ..records.validation import check_questions
from .base.constraints import Integer
from .base.percentile import FitPercentileGate, cross_fit

if TYPE_CHECKING:  # bm25s is imported on first fit, not with the package
    from ..retrieval.base import Hit
    from ..retrieval.bm25 import BM25Retriever

logger = logging.getLogger(__name__)

_QUERIES_FILE = "queries.json"
#: How queries become terms: only content words, each once (``"content-distinct"``);
#: ``"legacy"``, gates saved before that rule: bm25s's English stop words, repeats counted.
QueryTerms = Literal["content-distinct", "legacy"]
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
    _fitted_state = ("_fit_scores", "_index", "_queries", "_query_terms")
    _parameter_constraints: ClassVar[dict[str, Any]] = {"top_k": [Integer(1), None]}

    def __init__(self, *, top_k: int | None = 10, fallback_retrieve: bool = True) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self.top_k = top_k
        self._index: BM25Retriever | None = None
        self._queries: list[str] | None = None
        self._query_terms: QueryTerms | None = None

    @property
    def is_fitted(self) -> bool:
        return self._index is not None and super().is_fitted

    @property
    def queries_(self) -> list[str]:
        """The fitting queries the BM25 index is built over."""
        self._check_fitted()
        return list(self._fitted_value(self._queries))

    def fit(self, questions: Sequence[str]) -> Self:
        """Index the fitting queries (no answers needed)."""
        clean = check_questions(questions)
        if not clean:
            raise ValueError("bm25-difficulty needs at least one fitting question")
        index = _build_index(clean, "content-distinct")
        if index is None:
            raise ValueError(
                f"bm25-difficulty: none of the {len(clean)} fitting questions has a word BM25 can index "
                f"(stop words and one-letter words are dropped), e.g. {clean[0]!r}; fit on questions with content words"
            )
        if len(clean) == 1:  # nothing to compare a single query with
            fit_scores = np.zeros(1)
        else:

            def score_fold(kept: np.ndarray, held_out: np.ndarray) -> np.ndarray:
                fold_index = _build_index([clean[i] for i in kept], "content-distinct")
                held = [clean[i] for i in held_out]
                return -self._familiarity(fold_index, len(kept), held, "content-distinct")[0]

            fit_scores = cross_fit(len(clean), _FOLD_SEED, score_fold)
        self._index, self._queries, self._fit_scores, self._query_terms = index, clean, fit_scores, "content-distinct"
        logger.info("bm25-difficulty fitted on %d questions", len(clean))
        return self

    def _familiarity(
        self, index: BM25Retriever | None, n_indexed: int, questions: list[str], terms: QueryTerms
    ) -> tuple[np.ndarray, list[list[Hit]], int]:
        """Mean of each question's top-k scores (absent matches count 0), its hits, and k.
        No index (fitting queries of stop words only) matches nothing."""
        k = n_indexed if self.top_k is None else min(self.top_k, n_indexed)
        if index is None:
            hits: list[list[Hit]] = [[] for _ in questions]
        else:
            hits = index.search_batch(questions, k=k, distinct_terms=terms == "content-distinct")
        return np.array([sum(h.score for h in row) / k for row in hits], dtype=np.float64), hits, k

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        index = self._fitted_value(self._index)
        familiarity, hits, k = self._familiarity(
            index, len(self._fitted_value(self._queries)), questions, self._fitted_value(self._query_terms)
        )
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
        return {"n_queries": len(self._fitted_value(self._queries)), "query_terms": self._query_terms}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        queries = read_json_object(directory / _QUERIES_FILE).get("queries")
        if not isinstance(queries, list) or not queries or not all(isinstance(q, str) and q.strip() for q in queries):
            raise GateLoadError(f"{directory}: file {_QUERIES_FILE!r} must hold a non-empty list of questions")
        if state.get("n_queries") != len(queries):
            raise GateLoadError(
                f"{directory}: field 'state.n_queries' is {state.get('n_queries')!r} "
                f"but {_QUERIES_FILE!r} holds {len(queries)} questions"
            )
        terms = state.get("query_terms", "legacy")  # absent: saved before the rule
        if terms not in ("content-distinct", "legacy"):
            raise GateLoadError(
                f"{directory}: field 'state.query_terms' must be 'content-distinct' or 'legacy', got {terms!r}"
            )
        self._fit_scores = self._load_fit_scores(directory, len(queries))
        index = _build_index(queries, terms)  # indexing takes milliseconds
        if index is None:
            raise GateLoadError(f"{directory}: file {_QUERIES_FILE!r} holds no word BM25 can index")
        self._index, self._queries, self._query_terms = index, queries, terms


def _stopwords(terms: QueryTerms) -> str | list[str]:
    """The stop words dropped under ``terms``: bm25s's English list, and under
    ``"content-distinct"`` scikit-learn's too (the wh-words, "please", ...)."""
    if terms == "legacy":
        return "en"
    from bm25s.stopwords import STOPWORDS_EN

    from ..signals.word_rarity import stop_words

    return sorted(stop_words() | set(STOPWORDS_EN))


def _build_index(queries: list[str], terms: QueryTerms) -> BM25Retriever | None:
    """A BM25 index over queries (the project's retriever: stop words dropped, stemming),
    or ``None`` when no query keeps a word once stop words are dropped (BM25 cannot
    index an empty vocabulary)."""
    import bm25s

    from ..retrieval.bm25 import BM25Retriever

    stopwords = _stopwords(terms)
    tokens = bm25s.tokenize(queries, stopwords=stopwords, return_ids=False, show_progress=False)
    if not any(tokens):
        return None
    records = [CorpusRecord(str(i), "", q) for i, q in enumerate(queries)]
    return BM25Retriever.from_records(records, stopwords=stopwords)
