"""How well stated uncertainty matches correctness (When-to-Retrieve, SPEC §3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def alignment_metrics(
    uncertain: Sequence[bool] | np.ndarray, correct: Sequence[float] | np.ndarray
) -> dict[str, float]:
    """The paper's five figures over N questions.

    ``uncertain[i]``: the model said it was uncertain (would retrieve); ``correct[i]``:
    its answer without retrieval was right (1/0; graded values count as right at
    >= 0.5). uncertain-rate = mean(unc); accuracy = mean(acc); overconfidence =
    #(not unc and not acc)/N; conservativeness = #(unc and acc)/N; alignment =
    #(acc != unc)/N = 1 - overconfidence - conservativeness.
    """
    unc = np.asarray(uncertain, dtype=bool)
    acc = np.asarray(correct, dtype=np.float64) >= 0.5
    if unc.shape != acc.shape:
        raise ValueError(f"got {unc.size} uncertainty flags for {acc.size} correctness values")
    if unc.size == 0:
        raise ValueError("alignment needs at least one question")
    return {
        "uncertain_rate": float(unc.mean()),
        "accuracy": float(acc.mean()),
        "overconfidence": float((~unc & ~acc).mean()),
        "conservativeness": float((unc & acc).mean()),
        "alignment": float((acc != unc).mean()),
    }
