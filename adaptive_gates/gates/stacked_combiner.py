"""The stacked gate's combiner: regularised logistic regression heads over standardised
features, kept as plain arrays (scoring and persistence need no scikit-learn object).

Targets:
- ``"gain"``: two heads, P(correct with retrieval) and P(correct without); the need
  score is their difference, the expected gain of retrieving (retrieve iff > 0). Every
  outcome row teaches both heads, including those where both answers are wrong.
- ``"helps"``: one head, P(retrieval helps), i.e. P(b > a).

A fractional outcome (the ``f1`` metric) enters a head as a positive row weighted by
its value and a negative row weighted by the rest, so one formulation serves every
metric. Logistic regression's probabilities are calibrated by its loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import GateLoadError
from ..persistence import load_array, save_array

Target = Literal["gain", "helps"]
TARGETS = ("gain", "helps")
#: The heads of each target; the need score is the first minus the second (if any).
HEADS: dict[str, tuple[str, ...]] = {"gain": ("with", "without"), "helps": ("helps",)}


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
    def load(cls, directory: Path, state: Any, n_features: int) -> "Combiner":
        """Read a combiner saved by ``save`` for ``n_features`` features."""
        if not isinstance(state, dict) or state.get("target") not in TARGETS:
            raise GateLoadError(f"{directory}: field 'state.combiner.target' must be one of {TARGETS}")
        intercepts = state.get("intercepts")
        names = HEADS[state["target"]]
        if not isinstance(intercepts, dict) or set(intercepts) != set(names) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in intercepts.values()
        ):
            raise GateLoadError(f"{directory}: field 'state.combiner.intercepts' must give a number per head {names}")
        if not isinstance(state.get("base_rate"), (int, float)):
            raise GateLoadError(f"{directory}: field 'state.combiner.base_rate' is missing")

        def vector(name: str) -> np.ndarray:
            array = load_array(directory, name).astype(np.float64)
            if array.shape != (n_features,) or not np.all(np.isfinite(array)):
                raise GateLoadError(f"{directory}: file {name!r} must hold {n_features} finite values, got {array.shape}")
            return array

        scale = vector("combiner_scale.npy")
        if np.any(scale <= 0):
            raise GateLoadError(f"{directory}: file 'combiner_scale.npy' must hold positive values")
        heads = {name: (vector(f"combiner_{name}.npy"), float(intercepts[name])) for name in names}
        return cls(state["target"], vector("combiner_mean.npy"), scale, heads, float(state["base_rate"]))


def _fit_head(z: np.ndarray, y: np.ndarray, C: float, what: str) -> tuple[np.ndarray, float]:
    """A logistic regression of outcomes ``y`` in [0, 1] on standardised ``z``."""
    from sklearn.linear_model import LogisticRegression

    if np.all(y == y[0]):
        raise ValueError(f"stacked gate: {what} is {y[0]:g} on every training row; there is nothing to learn")
    weights = np.r_[y, 1.0 - y]
    keep = weights > 0
    head = LogisticRegression(C=C, max_iter=5000)
    head.fit(np.vstack([z, z])[keep], np.r_[np.ones_like(y), np.zeros_like(y)][keep], sample_weight=weights[keep])
    return head.coef_[0].astype(np.float64), float(head.intercept_[0])


def fit_combiner(features: np.ndarray, a: np.ndarray, b: np.ndarray, target: Target, C: float) -> Combiner:
    """Fit the heads of ``target`` on feature rows and their outcomes without (``a``)
    and with (``b``) retrieval."""
    features = np.asarray(features, dtype=np.float64)
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)  # a constant column stays 0 after centring
    z = (features - mean) / scale
    if target == "gain":
        heads = {
            "with": _fit_head(z, b, C, "correctness with retrieval"),
            "without": _fit_head(z, a, C, "correctness without retrieval"),
        }
        base_rate = float(np.mean(b - a))
    else:
        helps = (b > a).astype(np.float64)
        heads = {"helps": _fit_head(z, helps, C, "'retrieval helps'")}
        base_rate = float(helps.mean())
    return Combiner(target, mean, scale, heads, base_rate)
