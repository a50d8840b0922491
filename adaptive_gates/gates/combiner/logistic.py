"""The stacked gate's combiner: regularised logistic regression heads over standardised
features, kept as plain arrays (scoring and persistence need no scikit-learn object).

Targets:
- ``"gain"``: two heads, P(correct with retrieval) and P(correct without); the need
  score is their difference, the expected gain of retrieving (retrieve iff > 0). Every
  outcome row teaches both heads, including those where both answers are wrong.
- ``"helps"``: one head, P(retrieval helps), i.e. P(b > a).

A fractional outcome (the ``f1`` metric) enters a head as a positive row weighted by
its value and a negative row weighted by the rest, so one formulation serves every
metric. A row may teach some heads only: its outcome is NaN for the others (a
feedback observation shows one of the two answers). Logistic regression's
probabilities are calibrated by its loss.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...errors import GateLoadError
from ...persistence.saved_format import load_array, read_json_file, save_array
from ...records.selfknowledge import KNOWN, UNKNOWN
from ..base.feedback import Feedback

Target = Literal["gain", "helps"]
TARGETS = ("gain", "helps")
#: The heads of each target; the need score is the first minus the second (if any).
HEADS: dict[str, tuple[str, ...]] = {"gain": ("with", "without"), "helps": ("helps",)}
#: The file of the questions of the rows a combiner was fitted on.
_QUESTIONS_FILE = "rows_questions.json"


@dataclass(frozen=True)
class Combiner:
    """Fitted heads: ``mean``/``scale`` standardise the features, each head is a
    (coefficients, intercept) pair; ``base_rate`` is the training mean of the target."""

    target: str
    mean: np.ndarray
    scale: np.ndarray
    heads: dict[str, tuple[np.ndarray, float]]
    base_rate: float

    def head_probabilities(self, features: np.ndarray) -> dict[str, np.ndarray]:
        """Each head's probability for each row of ``features``."""
        z = (np.asarray(features, dtype=np.float64) - self.mean) / self.scale
        return {name: 1.0 / (1.0 + np.exp(-(z @ coef + intercept))) for name, (coef, intercept) in self.heads.items()}

    def score(self, features: np.ndarray) -> np.ndarray:
        """Need scores: the expected gain of retrieving, or P(retrieval helps)."""
        p = self.head_probabilities(features)
        names = HEADS[self.target]
        return p[names[0]] - p[names[1]] if len(names) == 2 else p[names[0]]

    def save(self, directory: Path) -> dict[str, Any]:
        """Write the arrays into ``directory``; return the JSON part."""
        save_array(directory, "combiner_mean.npy", self.mean)
        save_array(directory, "combiner_scale.npy", self.scale)
        for name, (coef, _) in self.heads.items():
            save_array(directory, f"combiner_{name}.npy", coef)
        return {
            "target": self.target,
            "intercepts": {name: intercept for name, (_, intercept) in self.heads.items()},
            "base_rate": self.base_rate,
        }

    @classmethod
    def load(cls, directory: Path, state: Any, n_features: int) -> Combiner:
        """Read a combiner saved by ``save`` for ``n_features`` features."""
        if not isinstance(state, dict) or state.get("target") not in TARGETS:
            raise GateLoadError(f"{directory}: field 'state.combiner.target' must be one of {TARGETS}")
        intercepts = state.get("intercepts")
        names = HEADS[state["target"]]
        if (
            not isinstance(intercepts, dict)
            or set(intercepts) != set(names)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in intercepts.values())
        ):
            raise GateLoadError(f"{directory}: field 'state.combiner.intercepts' must give a number per head {names}")
        base_rate = state.get("base_rate")
        if isinstance(base_rate, bool) or not isinstance(base_rate, (int, float)):
            raise GateLoadError(f"{directory}: field 'state.combiner.base_rate' is missing or not a number")

        def vector(name: str) -> np.ndarray:
            array = load_array(directory, name).astype(np.float64)
            if array.shape != (n_features,) or not np.all(np.isfinite(array)):
                raise GateLoadError(
                    f"{directory}: file {name!r} must hold {n_features} finite values, got {array.shape}"
                )
            return array

        scale = vector("combiner_scale.npy")
        if np.any(scale <= 0):
            raise GateLoadError(f"{directory}: file 'combiner_scale.npy' must hold positive values")
        heads = {name: (vector(f"combiner_{name}.npy"), float(intercepts[name])) for name in names}
        return cls(state["target"], vector("combiner_mean.npy"), scale, heads, float(state["base_rate"]))


@dataclass(frozen=True)
class CombinerRows:
    """The outcome rows a combiner was fitted on, kept with the gate so that it can be
    refitted with feedback: each question, its feature row (the members' out-of-fold
    scores, then the question features) and its outcomes without (``a``) and with
    (``b``) retrieval. Saved as arrays and a JSON list of the questions."""

    questions: tuple[str, ...]
    features: np.ndarray
    a: np.ndarray
    b: np.ndarray

    def save(self, directory: Path) -> dict[str, Any]:
        """Write the rows into ``directory``; return the JSON part."""
        save_array(directory, "rows_features.npy", self.features)
        save_array(directory, "rows_without.npy", self.a)
        save_array(directory, "rows_with.npy", self.b)
        (directory / _QUESTIONS_FILE).write_text(json.dumps(list(self.questions), ensure_ascii=False), encoding="utf-8")
        return {"size": len(self.questions)}

    @classmethod
    def load(cls, directory: Path, state: Any, n_features: int) -> CombinerRows:
        """Read rows saved by ``save`` with ``n_features`` features."""
        size = state.get("size") if isinstance(state, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise GateLoadError(f"{directory}: field 'state.rows.size' is missing or malformed")
        questions = read_json_file(directory, _QUESTIONS_FILE)
        if not isinstance(questions, list) or len(questions) != size or not all(isinstance(q, str) for q in questions):
            raise GateLoadError(f"{directory}: file {_QUESTIONS_FILE!r} must list the {size} questions")
        features = load_array(directory, "rows_features.npy").astype(np.float64)
        if features.shape != (size, n_features) or not np.all(np.isfinite(features)):
            raise GateLoadError(
                f"{directory}: file 'rows_features.npy' must hold {size}x{n_features} finite values, "
                f"got {features.shape}"
            )
        outcomes = []
        for name in ("rows_without.npy", "rows_with.npy"):
            column = load_array(directory, name).astype(np.float64)
            if column.shape != (size,) or not np.all((column >= 0) & (column <= 1)):
                raise GateLoadError(f"{directory}: file {name!r} must hold {size} outcomes in [0, 1]")
            outcomes.append(column)
        return cls(tuple(questions), features, *outcomes)


def _fit_head(
    z: np.ndarray, y: np.ndarray, C: float, what: str, sample_weight: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """A logistic regression of outcomes ``y`` in [0, 1] on standardised ``z``; rows
    whose outcome is NaN do not teach this head. ``sample_weight``: how much each row
    counts (default 1 each), e.g. the inverse of the chance it was observed."""
    from sklearn.linear_model import LogisticRegression

    rows, labels, weights = weighted_rows(z, y, sample_weight, f"stacked gate: {what}")
    head = LogisticRegression(C=C, max_iter=5000)
    head.fit(rows, labels, sample_weight=weights)
    return head.coef_[0].astype(np.float64), float(head.intercept_[0])


def weighted_rows(
    z: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | Sequence[float] | None, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outcomes ``y`` in [0, 1] as a binary classifier's rows: each row of ``z`` once
    as a positive weighted by its outcome and once as a negative weighted by the rest,
    each scaled by its ``sample_weight`` (default 1); rows whose outcome is NaN, and
    parts of weight 0, are left out. A ``ValueError`` (``what`` named) when the rows
    left hold one outcome only: there is nothing to learn."""
    row_weight = row_weights(sample_weight, len(y))
    known = ~np.isnan(y) & (row_weight > 0)
    z, y, row_weight = z[known], y[known], row_weight[known]
    if len(y) == 0 or np.all(y == y[0]):
        value = "missing" if len(y) == 0 else f"{y[0]:g}"
        raise ValueError(f"{what} is {value} on every training row; there is nothing to learn")
    weights = np.r_[y * row_weight, (1.0 - y) * row_weight]
    keep = weights > 0
    labels = np.r_[np.ones_like(y), np.zeros_like(y)]
    return np.vstack([z, z])[keep], labels[keep], weights[keep]


#: What each head predicts, as named in its "nothing to learn" error.
_HEAD_OUTCOMES = {
    "with": "correctness with retrieval",
    "without": "correctness without retrieval",
    "helps": "'retrieval helps'",
}


def head_outcomes(a: np.ndarray, b: np.ndarray, target: Target) -> dict[str, np.ndarray]:
    """Each head's outcome on rows with outcomes without (``a``) and with (``b``)
    retrieval (outcome records). An outcome not observed is NaN, and so is the outcome
    of each head that needs it ("helps" needs both)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if target == "gain":
        return {"with": b, "without": a}
    return {"helps": np.where(np.isnan(a) | np.isnan(b), np.nan, (b > a).astype(np.float64))}


def feedback_outcomes(entries: Sequence[Feedback], target: Target) -> dict[str, np.ndarray]:
    """Each head's outcome on feedback observations (NaN: the observation does not teach it).

    One observation shows one answer. ``"gain"``: an answer with retrieval teaches the
    head of correctness with retrieval, one without it the other head. ``"helps"``: the
    self-knowledge label the feedback rule gave it (``adaptive_gates.gates.base.feedback``): known
    is 0, unknown 1; an observation without a label (every answer with retrieval, both
    answers wrong) teaches nothing, as it adds nothing to an SKR memory.
    """
    if target == "gain":
        shown = np.array([float(e.correct) for e in entries], dtype=np.float64)
        retrieved = np.array([e.retrieved for e in entries], dtype=bool)
        return {"with": np.where(retrieved, shown, np.nan), "without": np.where(retrieved, np.nan, shown)}
    helps: dict[int | None, float] = {KNOWN: 0.0, UNKNOWN: 1.0}
    return {"helps": np.array([helps.get(e.label, np.nan) for e in entries], dtype=np.float64)}


def row_weights(sample_weight: np.ndarray | Sequence[float] | None, n: int) -> np.ndarray:
    """``sample_weight`` as ``n`` finite non-negative floats (all 1 when ``None``); a
    ``ValueError`` naming what is wrong otherwise."""
    if sample_weight is None:
        return np.ones(n, dtype=np.float64)
    weights = np.asarray(sample_weight, dtype=np.float64)
    if weights.shape != (n,):
        raise ValueError(f"sample_weight must hold one weight per row ({n}), got shape {weights.shape}")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("sample_weight must hold finite, non-negative weights")
    return weights


def standardisation(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and spread of each feature column, by which the heads see it."""
    features = np.asarray(features, dtype=np.float64)
    scale = features.std(axis=0)
    return features.mean(axis=0), np.where(scale > 0, scale, 1.0)  # a constant column stays 0 after centring


def fit_combiner(
    features: np.ndarray,
    outcomes: dict[str, np.ndarray],
    target: Target,
    C: float,
    scaling: tuple[np.ndarray, np.ndarray] | None = None,
    sample_weight: np.ndarray | None = None,
) -> Combiner:
    """Fit the heads of ``target`` on feature rows and each head's outcome per row
    (``head_outcomes``; NaN where a row does not teach that head). ``scaling``: the
    ``standardisation`` to use (default: that of ``features``); a refit keeps that
    of the outcome rows, so rows that teach one head leave the other as it was.
    ``sample_weight``: how much each row counts in every head and in the base rate
    (default 1 each)."""
    features = np.asarray(features, dtype=np.float64)
    if set(outcomes) != set(HEADS[target]):
        raise ValueError(f"stacked gate: target {target!r} has the heads {HEADS[target]}, got {sorted(outcomes)}")
    mean, scale = standardisation(features) if scaling is None else scaling
    z = (features - mean) / scale
    weights = row_weights(sample_weight, len(features))
    heads = {
        name: _fit_head(z, np.asarray(outcomes[name], dtype=np.float64), C, _HEAD_OUTCOMES[name], weights)
        for name in HEADS[target]
    }
    means = [_weighted_mean(np.asarray(outcomes[name], dtype=np.float64), weights) for name in HEADS[target]]
    base_rate = means[0] - means[1] if target == "gain" else means[0]
    return Combiner(target, mean, scale, heads, base_rate)


def _weighted_mean(y: np.ndarray, weights: np.ndarray) -> float:
    """The weighted mean of the known (not NaN) values of ``y``."""
    known = ~np.isnan(y) & (weights > 0)
    return float(np.average(y[known], weights=weights[known]))
