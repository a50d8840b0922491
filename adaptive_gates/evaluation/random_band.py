"""How far chance alone moves a gate's figures (SPEC §6).

On a few hundred questions a gate with random need scores reaches a gap capture
well away from 0, and a random gate retrieving for as many questions as a real
one reaches a spread of accuracies. A gate's figure means something only outside
that band; these helpers draw it from random permutations of the same outcomes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .curves import as_outcomes, gap_capture, oracle_curve, random_auc

#: Random gates drawn for a band: enough that its 2.5/97.5% percentiles move by
#: about 0.01 between seeds on 100–500 questions.
RANDOM_DRAWS = 1000

#: Scores drawn per block of random gates: bounds the memory of a band on many questions.
_BLOCK_CELLS = 1 << 20


def null_gap_captures(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, draws: int = RANDOM_DRAWS) -> np.ndarray:
    """Gap capture of ``draws`` gates with random need scores on the outcomes
    ``a`` (correct without retrieval) and ``b`` (with it); empty when the oracle
    is no better than random (gap capture undefined)."""
    a, b = as_outcomes(a, b)
    auc_random, auc_oracle = random_auc(a, b), oracle_curve(a, b).auc
    if gap_capture(auc_random, auc_random, auc_oracle) is None:
        return np.zeros(0)
    # All draws at once, a block of rows at a time (one Python-level curve per draw cost
    # more than the arithmetic). The rows are the stream drawing them one by one gives.
    # Uniform floats tie with negligible probability, so each gate retrieves in its
    # scores' order and its curve is the plain cumulative gain (``gate_curve`` without ties).
    rates, gain = np.arange(a.size + 1) / a.size, b - a
    rows = max(1, _BLOCK_CELLS // a.size)
    aucs = []
    for start in range(0, draws, rows):
        order = np.argsort(-rng.random((min(rows, draws - start), a.size)), axis=1, kind="stable")
        cumulative = np.cumsum(gain[order], axis=1)
        accuracy = (a.sum() + np.concatenate([np.zeros((len(order), 1)), cumulative], axis=1)) / a.size
        aucs.append(np.trapezoid(accuracy, rates, axis=1))
    return (np.concatenate(aucs) - auc_random) / (auc_oracle - auc_random)


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
