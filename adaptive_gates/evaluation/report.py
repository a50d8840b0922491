"""The gate-quality report every gate is judged by (SPEC §6)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .curves import gap_capture, gate_curve, oracle_curve, random_auc
from .units import field_units


def decision_auroc(scores: np.ndarray, a: np.ndarray, b: np.ndarray) -> float | None:
    """AUROC of the need score against the label "retrieval helps" (b > a);
    ``None`` when only one label occurs."""
    from sklearn.metrics import roc_auc_score

    helps = np.asarray(b) > np.asarray(a)
    if helps.all() or not helps.any():
        return None
    return float(roc_auc_score(helps, np.asarray(scores, dtype=np.float64)))


def threshold_outcome(retrieve: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Realised retrieval rate and accuracy of concrete decisions."""
    retrieve = np.asarray(retrieve, dtype=bool)
    rate = float(retrieve.mean())
    return {
        "retrieval_rate": rate,
        "accuracy": float(np.where(retrieve, b, a).mean()),
        "calls_saved": 1.0 - rate,
    }


def evaluate_scores(
    scores: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    *,
    gate: str,
    metric: str,
    retrieve: np.ndarray | None = None,
    target_rate: float | None = None,
    lm_calls: np.ndarray | None = None,
    retrieves_first: bool = False,
) -> dict[str, Any]:
    """Build the report of DESIGN.md for one gate on one test set.

    Args:
        scores: need scores of the test questions (higher = retrieve).
        a, b: per-question correctness without / with retrieval (0/1 or graded).
        gate: gate name for the report.
        metric: metric name for the report.
        retrieve: the gate's actual decisions at its threshold, for ``at_threshold``
            and the field's units (``units.field_units``: ``in_accuracy``,
            ``retrieval_calls``, ``lm_calls``, ``calls_to_match_always``, ``random_band``).
        target_rate: the retrieval rate the threshold was calibrated for, if any.
        lm_calls: LM calls per question at ``retrieve`` (``units.lm_calls_per_decision``);
            default one each.
        retrieves_first: the gate retrieves for every question to decide
            (``Gate.retrieves_first``): one retrieval call each, whatever it decides.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    curve = gate_curve(scores, a, b)
    oracle = oracle_curve(a, b)
    auc_random = random_auc(a, b)
    report: dict[str, Any] = {
        "gate": gate,
        "n": int(a.size),
        "metric": metric,
        "never": float(a.mean()),
        "always": float(b.mean()),
        "oracle": float(np.maximum(a, b).mean()),
        "auc": curve.auc,
        "auc_random": auc_random,
        "auc_oracle": oracle.auc,
        "gap_capture": gap_capture(curve.auc, auc_random, oracle.auc),
        "decision_auroc": decision_auroc(scores, a, b),
        "curve": curve.as_list(),
        "oracle_curve": oracle.as_list(),
    }
    at_threshold: dict[str, Any] = {"target_rate": target_rate}
    report["at_threshold"] = at_threshold
    if retrieve is not None:
        at_threshold.update(threshold_outcome(retrieve, a, b))
        report.update(field_units(curve, a, b, retrieve, lm_calls, retrieves_first=retrieves_first))
    return report
