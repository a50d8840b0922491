"""Offline evaluation of a gate on outcome records (no LLM needed).

The gate is fitted on the training records and scores the test records. Its
threshold, when calibrated, comes from *out-of-fold* scores on the training
records (cross-fitting), so neither the threshold nor the fit ever sees a test
question, and a memory gate never finds a question among its own neighbours.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..data import OutcomeRecord
from ..folds import GateFactory, cross_fitted_scores, fit_gate
from ..gates.base import Gate
from ..selfknowledge import outcome_scores
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
) -> Gate:
    """Fit a gate on all records and, if asked, calibrate its threshold on
    out-of-fold scores: for ``target_rate``, or for best accuracy (``objective``,
    optionally under ``max_rate``)."""
    gate = fit_gate(factory, records, metric)
    if target_rate is None and not objective:
        return gate
    oof = cross_fitted_scores(factory, records, metric, folds=folds)
    if objective:
        a, b = outcome_scores(records, metric)
        return gate.calibrate_scores(oof, correct_without=a, correct_with=b, max_rate=max_rate)
    return gate.calibrate_scores(oof, target_rate)


def evaluate_offline(
    factory: GateFactory,
    train: Sequence[OutcomeRecord],
    test: Sequence[OutcomeRecord],
    metric: str = "contains",
    target_rate: float | None = None,
) -> dict[str, Any]:
    """The DESIGN.md report of a gate fitted on ``train`` and scored on ``test``."""
    gate = fit_calibrated(factory, train, metric, target_rate=target_rate)
    scores = gate.score_records(test)
    retrieve = gate.retrieves(scores)
    a, b = outcome_scores(test, metric)
    lm_calls = lm_calls_per_decision(retrieve, answers_first=getattr(gate, "answers_first", False))
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
    report["threshold"] = gate.threshold_
    report["n_train"] = len(train)
    return report
