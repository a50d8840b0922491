"""How far chance alone moves a gate's figures (SPEC §6).

On a few hundred questions a gate with random need scores reaches a gap capture
well away from 0, and a random gate retrieving for as many questions as a real
one reaches a spread of accuracies. A gate's figure means something only outside
that band; these helpers draw it from random permutations of the same outcomes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .curves import as_outcomes, gap_capture, gate_curve, oracle_curve, random_auc

#: Random gates drawn for a band: enough that its 2.5/97.5% percentiles move by
#: about 0.01 between seeds on 100–500 questions.
RANDOM_DRAWS = 1000


def null_gap_captures(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, draws: int = RANDOM_DRAWS) -> np.ndarray:
    """Gap capture of ``draws`` gates with random need scores on the outcomes
    ``a`` (correct without retrieval) and ``b`` (with it); empty when the oracle
    is no better than random (gap capture undefined)."""
    a, b = as_outcomes(a, b)
    auc_random, auc_oracle = random_auc(a, b), oracle_curve(a, b).auc
    if gap_capture(auc_random, auc_random, auc_oracle) is None:
        return np.zeros(0)
    return np.array(
        [gap_capture(gate_curve(rng.random(a.size), a, b).auc, auc_random, auc_oracle) for _ in range(draws)]
    )


def null_accuracies(
    a: np.ndarray, b: np.ndarray, n_retrieve: int, rng: np.random.Generator, draws: int = RANDOM_DRAWS
) -> np.ndarray:
    """Accuracy of ``draws`` gates that retrieve for ``n_retrieve`` questions
    chosen at random (the same retrieval rate as a real gate's decisions)."""
    a, b = as_outcomes(a, b)
    if not 0 <= n_retrieve <= a.size:
        raise ValueError(f"n_retrieve must be in [0, {a.size}], got {n_retrieve}")
    gain = b - a
    chosen = np.argsort(rng.random((draws, a.size)), axis=1)[:, :n_retrieve]
    return (a.sum() + gain[chosen].sum(axis=1)) / a.size


def random_band(
    a: np.ndarray,
    b: np.ndarray,
    retrieve: np.ndarray | None = None,
    *,
    level: float = 0.95,
    draws: int = RANDOM_DRAWS,
    seed: int = 0,
) -> dict[str, Any]:
    """The central ``level`` interval of random gates' gap capture, and of their
    accuracy at the retrieval rate of the decisions ``retrieve`` (if given).

    Returns ``{"level", "draws", "gap_capture": [low, high] | None, and with
    ``retrieve``: "retrieval_rate", "accuracy": [low, high]}``; ``gap_capture`` is
    ``None`` when the oracle is no better than random.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if draws < 1:
        raise ValueError(f"draws must be positive, got {draws}")
    tails = [50 * (1 - level), 50 * (1 + level)]
    rng = np.random.default_rng(seed)
    captures = null_gap_captures(a, b, rng, draws)
    band: dict[str, Any] = {
        "level": level,
        "draws": draws,
        "gap_capture": [float(q) for q in np.percentile(captures, tails)] if captures.size else None,
    }
    if retrieve is not None:
        retrieve = np.asarray(retrieve, dtype=bool)
        if retrieve.shape != np.shape(a):
            raise ValueError(f"got {retrieve.size} decisions for {np.size(a)} outcomes")
        accuracies = null_accuracies(a, b, int(retrieve.sum()), rng, draws)
        band["retrieval_rate"] = float(retrieve.mean())
        band["accuracy"] = [float(q) for q in np.percentile(accuracies, tails)]
    return band
