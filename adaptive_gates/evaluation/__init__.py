"""Gate-quality evaluation: curves, gap capture, reports and plots (SPEC §6)."""

from .alignment import alignment_metrics
from .crossfit import ALL, cross_fitted_decisions, cross_fitted_reports
from .curves import Curve, gap_capture, gate_curve, oracle_curve, random_auc
from .plot import plot_reports
from .live import evaluate_live
from .offline import cross_fitted_scores, evaluate_offline, fit_calibrated
from .random_band import RANDOM_DRAWS, null_accuracies, null_gap_captures, random_band
from .report import decision_auroc, evaluate_scores, threshold_outcome
from .units import calls_to_match_always, field_units, lm_calls_per_decision

__all__ = [
    "alignment_metrics",
    "evaluate_live",
    "Curve",
    "gate_curve",
    "oracle_curve",
    "random_auc",
    "decision_auroc",
    "evaluate_scores",
    "gap_capture",
    "threshold_outcome",
    "plot_reports",
    "cross_fitted_scores",
    "evaluate_offline",
    "fit_calibrated",
    "RANDOM_DRAWS",
    "null_accuracies",
    "null_gap_captures",
    "random_band",
    "ALL",
    "cross_fitted_decisions",
    "cross_fitted_reports",
    "calls_to_match_always",
    "field_units",
    "lm_calls_per_decision",
]
