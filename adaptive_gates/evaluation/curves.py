"""Accuracy against retrieval rate (SPEC §6).

Given per-question correctness without retrieval (``a``) and with it (``b``) and a
gate's need scores, retrieving for the ``j`` highest-need questions gives accuracy
``(sum(a) + sum of the first j gains b - a) / N``. Questions with equal scores are
in no particular order, so within a tie the expected gain is used (the curve is
linear across the tie): a gate earns no credit for a lucky order of its ties.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Curve:
    """Accuracy at retrieval rates ``0, 1/N, ..., 1``."""

    rates: np.ndarray
    accuracy: np.ndarray

    @property
    def auc(self) -> float:
        """Area under the curve over rates in [0, 1] (trapezoid rule)."""
        return float(np.trapezoid(self.accuracy, self.rates))

    def accuracy_at(self, rate: float) -> float:
        """Accuracy at a retrieval rate, interpolated between points."""
        return float(np.interp(rate, self.rates, self.accuracy))

    def as_list(self, digits: int = 6) -> list[list[float]]:
        """``[[rate, accuracy], ...]`` rounded, for JSON reports."""
        return [[round(float(r), digits), round(float(a), digits)] for r, a in zip(self.rates, self.accuracy)]


def as_outcomes(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"outcomes must be two non-empty 1-d arrays of one length, got {a.shape} and {b.shape}")
    return a, b


def _tie_aware_cumulative_gain(scores: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """Cumulative gain after retrieving 0..N questions in descending score order,
    spreading each tie group's gain evenly over its members."""
    order = np.argsort(-scores, kind="stable")
    s, g = scores[order], gain[order]
    # Start index of each run of equal scores, then the mean gain of its run.
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    sizes = np.diff(np.r_[starts, s.size])
    group_mean = np.add.reduceat(g, starts) / sizes
    per_item = np.repeat(group_mean, sizes)
    return np.r_[0.0, np.cumsum(per_item)]


def gate_curve(scores: np.ndarray, a: np.ndarray, b: np.ndarray) -> Curve:
    """The curve of a gate whose need scores are ``scores`` (higher = retrieve first)."""
    a, b = as_outcomes(a, b)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != a.shape:
        raise ValueError(f"got {scores.size} scores for {a.size} outcomes")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite (a gate returned NaN or inf)")
    n = a.size
    acc = (a.sum() + _tie_aware_cumulative_gain(scores, b - a)) / n
    return Curve(rates=np.arange(n + 1) / n, accuracy=acc)


def oracle_curve(a: np.ndarray, b: np.ndarray) -> Curve:
    """Retrieve where it helps first, then where it changes nothing, then where it hurts."""
    a, b = as_outcomes(a, b)
    return gate_curve(b - a, a, b)


def random_auc(a: np.ndarray, b: np.ndarray) -> float:
    """AUC of a random gate: the straight line from never- to always-retrieve."""
    a, b = as_outcomes(a, b)
    return float((a.mean() + b.mean()) / 2)


def gap_capture(auc_gate: float, auc_random: float, auc_oracle: float) -> float | None:
    """(AUC_gate - AUC_random) / (AUC_oracle - AUC_random); ``None`` when the oracle
    is no better than random (nothing to capture)."""
    room = auc_oracle - auc_random
    if room <= 1e-12:
        return None
    return float((auc_gate - auc_random) / room)
