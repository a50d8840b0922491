"""Gates thresholded the paper's way (IAPEK; Thrust and its BM25 baseline): λ is a
percentile of the fitting queries' own need scores, scored out of fold."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Self

import numpy as np

from ...errors import GateLoadError
from ...persistence.saved_format import load_array
from ...records.data import OutcomeRecord
from .calibration import threshold_for_rate
from .folds import fold_splits
from .gate import Gate

Level = Literal["scarce", "medium", "abundant"]

#: The paper's knowledge-need levels: the share of fitting queries that retrieve.
LEVELS: dict[str, float] = {"scarce": 0.25, "medium": 0.5, "abundant": 0.75}
#: Folds of the cross-fitted fitting scores: each fold model sees 95% of the queries.
#: Fewer folds bias the levels (fold models on 80% of 200 MiniLM-embedded queries
#: let 2-4 points fewer new queries retrieve than stated; 95%: under 1 point).
CV_FOLDS = 20


def cross_fit(n: int, seed: int, score_fold: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Scores of ``n`` fitting queries, ``CV_FOLDS`` seeded folds at a time:
    ``score_fold(kept, held_out)`` scores the held-out indices with a model of the kept ones."""
    scores = np.empty(n, dtype=np.float64)
    for kept, held_out in fold_splits(n, min(CV_FOLDS, n), seed):
        scores[held_out] = score_fold(kept, held_out)
    return scores


class FitPercentileGate(Gate):
    """A gate thresholded the paper's way (IAPEK, shared by Thrust and its BM25
    baseline): λ is a percentile of the fitting queries' own scores.

    The default threshold lets the "medium" 50% of fitting queries retrieve;
    ``set_level`` picks another level (or any rate) and records it as a calibration.
    """

    fitted_by = "fit(questions) or fit_outcomes(records)"

    def __init__(self, *, fallback_retrieve: bool = True) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self._fit_scores: np.ndarray | None = None

    @property
    def is_fitted(self) -> bool:
        return self._fit_scores is not None

    @property
    def fit_scores_(self) -> np.ndarray:
        """Need scores of the fitting queries, from which the levels are taken."""
        if self._fit_scores is None:
            raise self._not_fitted()
        return self._fit_scores

    def _default_threshold(self) -> float:
        return threshold_for_rate(self.fit_scores_, LEVELS["medium"]).threshold

    def set_level(self, level: Level | float) -> Self:
        """Threshold so that this share of the fitting queries retrieves: a level name
        (scarce 25%, medium 50%, abundant 75%) or a rate in [0, 1]."""
        if isinstance(level, str):
            if level not in LEVELS:
                raise ValueError(f"level must be one of {sorted(LEVELS)} or a rate, got {level!r}")
            level = LEVELS[level]
        return self.calibrate_scores(self.fit_scores_, float(level))

    def _fit_outcomes(self, records: list[OutcomeRecord], metric: str) -> None:
        """Fit on the records' questions; no answers are needed (``metric`` is unused)."""
        self.fit([r.question for r in records])

    @abstractmethod
    def fit(self, questions: Sequence[str]) -> Self:
        """Learn from fitting queries alone and keep their need scores."""

    def _load_fit_scores(self, directory: Path, n: int) -> np.ndarray:
        scores = load_array(directory, "fit_scores.npy").astype(np.float64)
        if scores.ndim != 1 or scores.size == 0 or not np.all(np.isfinite(scores)):
            raise GateLoadError(f"{directory}: file 'fit_scores.npy' must hold finite scores, got shape {scores.shape}")
        if scores.size != n:
            raise GateLoadError(
                f"{directory}: file 'fit_scores.npy' holds {scores.size} scores for {n} fitting queries"
            )
        return scores
