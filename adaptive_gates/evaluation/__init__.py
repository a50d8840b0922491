"""Gate-quality evaluation: curves, gap capture, reports and plots (SPEC §6)."""

from .alignment import alignment_metrics
from .crossfit import ALL, CrossFitted, cross_fit, cross_fitted_decisions, cross_fitted_reports, evaluate_cross_fitted
from .curves import Curve, gap_capture, gate_curve, oracle_curve, random_auc
from .judging import ModelMismatchWarning, graded_outcomes, judged_by, model_mismatch
from .learning_curve import LearningCurve, LearningPoint, default_sizes, learning_curve
from .learning_plot import plot_learning_curve
from .live import evaluate_live
from .offline import cross_fitted_scores, evaluate_fitted, evaluate_offline, fit_calibrated
from .plot import plot_reports
from .random_band import RANDOM_DRAWS, null_accuracies, null_gap_captures, random_band
from .report import decision_auroc, evaluate_scores, threshold_outcome
from .units import calls_to_match_always, field_units, lm_calls_per_decision

__all__ = [
    "ALL",
    "RANDOM_DRAWS",
    "CrossFitted",
    "Curve",
    "LearningCurve",
    "LearningPoint",
    "ModelMismatchWarning",
    "alignment_metrics",
    "calls_to_match_always",
    "cross_fit",
    "cross_fitted_decisions",
    "cross_fitted_reports",
    "cross_fitted_scores",
    "decision_auroc",
    "default_sizes",
    "evaluate_cross_fitted",
    "evaluate_fitted",
    "evaluate_live",
    "evaluate_offline",
    "evaluate_scores",
    "field_units",
    "fit_calibrated",
    "gap_capture",
    "gate_curve",
    "graded_outcomes",
    "judged_by",
    "learning_curve",
    "lm_calls_per_decision",
    "model_mismatch",
    "null_accuracies",
    "null_gap_captures",
    "oracle_curve",
    "plot_learning_curve",
    "plot_reports",
    "random_auc",
    "random_band",
    "threshold_outcome",
]
