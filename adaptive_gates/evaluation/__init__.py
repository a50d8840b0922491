"""Gate-quality evaluation: curves, gap capture, reports and plots (SPEC §6)."""

from .alignment import alignment_metrics
from .crossfit import ALL, cross_fitted_decisions, cross_fitted_reports
from .curves import Curve, gap_capture, gate_curve, oracle_curve, random_auc
from .live import evaluate_live
from .offline import cross_fitted_scores, evaluate_offline, fit_calibrated
from .plot import plot_reports
from .random_band import RANDOM_DRAWS, null_accuracies, null_gap_captures, random_band
from .report import decision_auroc, evaluate_scores, threshold_outcome
from .units import calls_to_match_always, field_units, lm_calls_per_decision

__all__ = [
    "ALL",
    "RANDOM_DRAWS",
    "Curve",
    "alignment_metrics",
    "calls_to_match_always",
    "cross_fitted_decisions",
    "cross_fitted_reports",
    "cross_fitted_scores",
    "decision_auroc",
    "evaluate_live",
    "evaluate_offline",
    "evaluate_scores",
    "field_units",
    "fit_calibrated",
    "gap_capture",
    "gate_curve",
    "lm_calls_per_decision",
    "null_accuracies",
    "null_gap_captures",
    "oracle_curve",
    "plot_reports",
    "random_auc",
    "random_band",
    "threshold_outcome",
]
