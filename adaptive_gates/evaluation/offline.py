"""Offline evaluation of a gate on outcome records (no LLM needed).

The gate is fitted on the training records and scores the test records. Its
threshold, when calibrated, comes from *out-of-fold* scores on the training
records (cross-fitting), so neither the threshold nor the fit ever sees a test
question, and a memory gate never finds a question among its own neighbours.
A gate already fitted (saved, or shipped) is scored as it is (``evaluate_fitted``).

Fits read the records graded as ``labels`` says (gold answers, or agreement with the
answer over passages); reports judge the test records against their gold answers when
every one has some, else by agreement (``judging``), and say which.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..gates.base.calibration import first_caller_outside_package, threshold_for_rate
from ..gates.base.folds import GateFactory, cross_fitted_scores, fit_gate
from ..gates.base.gate import Gate
from ..records.data import OutcomeRecord
from ..records.selfknowledge import Labels
from .judging import ModelMismatchWarning, graded_outcomes, judged_by, model_mismatch
from .report import evaluate_scores
from .units import lm_calls_per_decision

logger = logging.getLogger(__name__)


def fit_calibrated(
    factory: GateFactory,
    records: Sequence[OutcomeRecord],
    metric: str = "contains",
    *,
    target_rate: float | None = None,
    objective: bool = False,
    max_rate: float | None = None,
    folds: int = 5,
    seed: int = 0,
    labels: Labels = "gold",
    sources: Sequence[str] = (),
    out_of_fold: np.ndarray | None = None,
) -> Gate:
    """Fit a gate on all records (graded as ``labels`` says; ``sources`` name where
    they came from) and, if asked, calibrate its threshold on out-of-fold scores: for
    ``target_rate``, or for best accuracy (``objective``, optionally under
    ``max_rate``; gold labels only). ``out_of_fold``: those scores when the caller already has them
    (``cross_fitted_scores`` with the same labels), so they are not computed twice."""
    if objective and labels == "agreement":
        raise ValueError(
            "calibrating for the best accuracy on agreement labels would always retrieve (they rate every "
            "answer with retrieval right); calibrate for a target_rate"
        )
    gate = fit_gate(factory, records, metric, labels=labels, sources=sources)
    if target_rate is None and not objective:
        return gate
    oof = (
        cross_fitted_scores(factory, records, metric, folds=folds, seed=seed, labels=labels)
        if out_of_fold is None
        else np.asarray(out_of_fold, dtype=np.float64)
    )
    if oof.shape != (len(records),):
        raise ValueError(f"got {oof.size} out-of-fold scores for {len(records)} records")
    if objective:
        a, b = graded_outcomes(records, metric, labels)
        return gate.calibrate_scores(oof, correct_without=a, correct_with=b, max_rate=max_rate)
    return gate.calibrate_scores(oof, target_rate)


@dataclass(frozen=True)
class Judged:
    """A fitted gate's report on test records, with its need score and decision on
    each (in the records' order)."""

    report: dict[str, Any]
    scores: np.ndarray
    retrieve: np.ndarray


def evaluate_offline(
    factory: GateFactory,
    train: Sequence[OutcomeRecord],
    test: Sequence[OutcomeRecord],
    metric: str = "contains",
    target_rate: float | None = None,
    *,
    labels: Labels = "gold",
    sources: Sequence[str] = (),
) -> dict[str, Any]:
    """The DESIGN.md report of a gate fitted on ``train`` (graded as ``labels`` says)
    and scored on ``test``; ``"labels"`` and ``"judged_by"`` say how each was graded."""
    return judge_offline(factory, train, test, metric, target_rate, labels=labels, sources=sources).report


def judge_offline(
    factory: GateFactory,
    train: Sequence[OutcomeRecord],
    test: Sequence[OutcomeRecord],
    metric: str = "contains",
    target_rate: float | None = None,
    *,
    labels: Labels = "gold",
    sources: Sequence[str] = (),
) -> Judged:
    """``evaluate_offline``'s report with the test records' scores and decisions."""
    gate = fit_calibrated(factory, train, metric, target_rate=target_rate, labels=labels, sources=sources)
    judged = judge_fitted(gate, test, metric)
    judged.report["at_threshold"]["target_rate"] = target_rate
    judged.report["n_train"] = len(train)
    return judged


def evaluate_fitted(
    gate: Gate, test: Sequence[OutcomeRecord], metric: str = "contains", target_rate: float | None = None
) -> dict[str, Any]:
    """The report of a fitted gate scored on ``test`` as it is (``judge_fitted``)."""
    return judge_fitted(gate, test, metric, target_rate).report


def judge_fitted(
    gate: Gate, test: Sequence[OutcomeRecord], metric: str = "contains", target_rate: float | None = None
) -> Judged:
    """The report of a fitted gate scored on ``test`` as it is: nothing refitted.

    With ``target_rate`` it decides at the threshold that retrieved that share of the
    questions it was calibrated on (``Gate.threshold_at_rate``), or, for a gate never
    calibrated, of the test questions' own scores: a quantile of scores, so no test
    outcome is read either way (``"threshold_from"`` says which); else at its own
    threshold. The report holds the gate's ``fitted_on`` and, when ``test`` holds
    another LLM's answers than those it was fitted on, ``model_mismatch``
    (``judging.model_mismatch``, also warned of)."""
    scores = gate.score_records(test)
    if target_rate is None:
        threshold, source = gate.threshold_, "gate"
    elif gate.calibration_ is not None:
        threshold, source = gate.threshold_at_rate(target_rate), "calibration"
    else:
        threshold, source = threshold_for_rate(scores, target_rate).threshold, "test questions"
    retrieve = gate.retrieves(scores, threshold)
    judge = judged_by(test)
    a, b = graded_outcomes(test, metric, judge)
    lm_calls = lm_calls_per_decision(retrieve, answers_first=gate.answers_first)
    report = evaluate_scores(
        scores,
        a,
        b,
        gate=gate.name,
        metric=metric,
        retrieve=retrieve,
        target_rate=target_rate,
        lm_calls=lm_calls,
        retrieves_first=gate.retrieves_first,
    )
    fitted_on = gate.fitted_on_
    report["threshold"] = threshold
    report["threshold_from"] = source
    report["labels"] = None if fitted_on is None else fitted_on.labels
    report["judged_by"] = judge
    report["fitted_on"] = None if fitted_on is None else fitted_on.to_dict()
    mismatch = model_mismatch(fitted_on, test)
    if mismatch is not None:
        warnings.warn(mismatch["message"], ModelMismatchWarning, stacklevel=first_caller_outside_package())
        report["model_mismatch"] = mismatch
    return Judged(report, np.asarray(scores, dtype=np.float64), np.asarray(retrieve, dtype=bool))
