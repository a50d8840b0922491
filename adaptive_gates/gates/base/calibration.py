"""Thresholds fitted to a user's own data and budget.

Every gate retrieves when its need score is strictly above its threshold. These
functions pick that threshold either for a target retrieval rate (no labels
needed: a quantile of the need scores) or for an objective on outcome records
(best accuracy, optionally with the retrieval rate held under a budget).

Calibrate on at least ``MIN_CALIBRATION_QUESTIONS`` questions; a gate warns
(``CalibrationWarning``) below that.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ...records.validation import check_outcomes

#: Fewer calibration questions draw a ``CalibrationWarning``. The threshold is cut
#: between the scores of n questions, so the rates it can reach step by 1/n, and the
#: share of *new* questions it retrieves is uncertain by about sqrt(r(1-r)/n): 0.10
#: at r = 0.3 with 20 questions (one question reaches only 0 or 1).
MIN_CALIBRATION_QUESTIONS = 20
#: How many calibration scores a calibration keeps (for thresholds at other rates).
SCORE_SAMPLE_SIZE = 256


class CalibrationWarning(UserWarning):
    """A threshold was calibrated on too few questions to be trusted."""


@dataclass(frozen=True)
class Calibration:
    """How a threshold was chosen; kept with the gate and saved with it."""

    method: str  # "rate" or "objective"
    threshold: float
    n: int
    realised_rate: float
    target_rate: float | None = None
    max_rate: float | None = None
    accuracy: float | None = None
    #: Up to ``SCORE_SAMPLE_SIZE`` of the calibration scores (evenly spaced order
    #: statistics, ascending): what a threshold for another rate is read from.
    score_sample: tuple[float, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["score_sample"] = None if self.score_sample is None else list(self.score_sample)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        sample = data.get("score_sample")
        return cls(**{**data, "score_sample": None if sample is None else tuple(float(v) for v in sample)})

    def threshold_at_rate(self, rate: float) -> float:
        """The threshold that retrieves about ``rate`` of the calibration questions
        (read from the kept score sample, ties as ``threshold_for_rate`` treats them)."""
        if self.score_sample is None:
            raise ValueError("this calibration kept no scores (it was saved before they were kept); calibrate again")
        return threshold_for_rate(np.asarray(self.score_sample), rate).threshold

    def warn_if_too_few(self) -> None:
        """Warn when fewer than ``MIN_CALIBRATION_QUESTIONS`` questions set this
        threshold; the warning points at the caller's code, not at this package."""
        if self.n >= MIN_CALIBRATION_QUESTIONS:
            return
        goal = f"a target rate of {self.target_rate:.0%}" if self.target_rate is not None else "the best accuracy"
        warnings.warn(
            f"threshold calibrated on {self.n} question{'s' if self.n != 1 else ''}, fewer than "
            f"{MIN_CALIBRATION_QUESTIONS}: it retrieves for {self.realised_rate:.0%} of them against {goal}, "
            "and on new questions its retrieval rate can be far from that; "
            f"calibrate on at least {MIN_CALIBRATION_QUESTIONS} questions (more for a precise rate)",
            CalibrationWarning,
            stacklevel=first_caller_outside_package(),
        )


def first_caller_outside_package() -> int:
    """The ``stacklevel`` (seen from the function that calls this) of the first frame
    that is not this package's code."""
    root = sys.modules[__name__.partition(".")[0]].__file__ or __file__
    package = os.path.dirname(os.path.abspath(root)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _finite_scores(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if scores.size == 0:
        raise ValueError("calibration needs at least one score")
    if not np.all(np.isfinite(scores)):
        raise ValueError("calibration scores must be finite")
    return scores


def _score_sample(scores: np.ndarray) -> tuple[float, ...]:
    """At most ``SCORE_SAMPLE_SIZE`` order statistics of ``scores``, evenly spaced and
    ascending, so ties and the spread survive in a few kilobytes of config."""
    ascending = np.sort(scores)
    if ascending.size > SCORE_SAMPLE_SIZE:
        ascending = ascending[np.round(np.linspace(0, ascending.size - 1, SCORE_SAMPLE_SIZE)).astype(int)]
    return tuple(float(v) for v in ascending)


def _cut_positions(desc: np.ndarray) -> np.ndarray:
    """The reachable retrieval counts j: 0, every change of score value, and N."""
    return np.r_[0, np.flatnonzero(desc[1:] != desc[:-1]) + 1, desc.size]


def _threshold_retrieving_top(desc: np.ndarray, j: int) -> float:
    """A threshold that the top ``j`` of the descending scores exceed and the rest do not."""
    if j == 0:
        return float(desc[0])
    if j == desc.size:
        return float(np.nextafter(desc[-1], -np.inf))
    high, low = float(desc[j - 1]), float(desc[j])
    mid = (high + low) / 2  # the midpoint generalises best to unseen scores
    return mid if low <= mid < high else low


def threshold_for_rate(scores: np.ndarray, target_rate: float) -> Calibration:
    """The threshold under which about ``target_rate`` of these scores retrieve.

    With tied scores the exact rate may be unreachable; the closest reachable
    rate is taken (fewer retrievals on an exact draw).
    """
    if not 0.0 <= target_rate <= 1.0 or math.isnan(target_rate):
        raise ValueError(f"target_rate must be in [0, 1], got {target_rate}")
    scores = _finite_scores(scores)
    desc = np.sort(scores)[::-1]
    n = desc.size
    cuts = _cut_positions(desc)
    j = int(cuts[np.argmin(np.abs(cuts / n - target_rate))])
    return Calibration(
        "rate",
        _threshold_retrieving_top(desc, j),
        n,
        j / n,
        target_rate=target_rate,
        score_sample=_score_sample(scores),
    )


def threshold_for_objective(
    scores: np.ndarray,
    a: np.ndarray | Sequence[float],
    b: np.ndarray | Sequence[float],
    max_rate: float | None = None,
) -> Calibration:
    """The threshold with the best accuracy on outcome records.

    Args:
        scores: need scores of the calibration questions.
        a, b: their correctness without / with retrieval: 0/1, bools or graded
            scores in [0, 1] (F1); anything else raises ``ValueError``.
        max_rate: when given, only thresholds retrieving at most this share count.

    Among equally accurate thresholds the one retrieving least wins.
    """
    scores = _finite_scores(scores)
    a = check_outcomes(np.asarray(a).ravel().tolist(), "correct_without")
    b = check_outcomes(np.asarray(b).ravel().tolist(), "correct_with")
    if not (scores.size == a.size == b.size):
        raise ValueError(f"got {scores.size} scores for {a.size}/{b.size} outcomes")
    if max_rate is not None and not 0.0 <= max_rate <= 1.0:
        raise ValueError(f"max_rate must be in [0, 1], got {max_rate}")
    order = np.argsort(-scores, kind="stable")
    desc, gain = scores[order], (b - a)[order]
    n = desc.size
    cuts = _cut_positions(desc)
    accuracy = (a.sum() + np.r_[0.0, np.cumsum(gain)][cuts]) / n
    allowed = np.ones_like(accuracy, dtype=bool) if max_rate is None else cuts / n <= max_rate + 1e-12
    best = int(np.flatnonzero(allowed)[np.argmax(accuracy[allowed])])
    j = int(cuts[best])
    return Calibration(
        "objective",
        _threshold_retrieving_top(desc, j),
        n,
        j / n,
        max_rate=max_rate,
        accuracy=float(accuracy[best]),
        score_sample=_score_sample(scores),
    )
