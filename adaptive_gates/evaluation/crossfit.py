"""Judge a gate on every question of several data sets, none of which it saw.

Cross-fitting: each fold's gate is fitted on the other folds and scores the held-out
one; its threshold is calibrated for the best accuracy on the other folds' out-of-fold
scores and outcomes, and it decides the held-out questions. The reports then hold
every question once, scored and decided by a gate that never saw its outcome.

The fit never sees a held-out outcome and the threshold is chosen on other questions'
outcomes, but their scores come from gates fitted with the held-out fold among others:
a slight, indirect look that a nested cross-fit (``fit_calibrated`` per fold) avoids
at six times the cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..data import OutcomeRecord
from ..folds import GateFactory, cross_fitted_folds
from ..gates.base import Gate
from ..selfknowledge import outcome_scores
from .report import evaluate_scores
from .units import lm_calls_per_decision

#: The key of the report over all data sets together.
ALL = "all"


def cross_fitted_decisions(
    factory: GateFactory, records: Sequence[OutcomeRecord], metric: str = "contains", folds: int = 5, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, Gate]:
    """Out-of-fold need scores and decisions of ``records`` (calibrated for the best
    accuracy, see the module), and the first fold's gate (which says what a decision
    costs: ``answers_first``, ``retrieves_first``)."""
    scores, fitted = cross_fitted_folds(factory, records, metric, folds, seed)
    a, b = outcome_scores(records, metric)
    retrieve = np.zeros(len(records), dtype=bool)
    for gate, kept, held_out in fitted:
        gate.calibrate_scores(scores[kept], correct_without=a[kept], correct_with=b[kept])
        retrieve[held_out] = gate.retrieves(scores[held_out])
    return scores, retrieve, fitted[0][0]


def cross_fitted_reports(
    factory: GateFactory,
    datasets: Mapping[str, Sequence[OutcomeRecord]],
    *,
    pooled: bool,
    name: str,
    metric: str = "contains",
    folds: int = 5,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """The report (with the field's units) of a cross-fitted gate per data set and over
    all of them (key ``ALL``).

    ``pooled``: the folds cut all data sets together and each fold's gate learns from
    every data set's training questions at once; else each data set is cross-fitted on
    its own. In the latter the ``ALL`` curve orders questions by scores of several
    gates, so only its decisions' figures compare with the pooled one's.
    """
    if not datasets:
        raise ValueError("no data sets given")
    parts = [list(rows) for rows in datasets.values()]
    if pooled:
        scores, retrieve, gate = cross_fitted_decisions(
            factory, [r for rows in parts for r in rows], metric, folds, seed
        )
    else:
        each = [cross_fitted_decisions(factory, rows, metric, folds, seed) for rows in parts]
        scores, retrieve = np.concatenate([e[0] for e in each]), np.concatenate([e[1] for e in each])
        gate = each[0][2]

    def report(rows: list[OutcomeRecord], where: slice) -> dict[str, Any]:
        a, b = outcome_scores(rows, metric)
        decided = retrieve[where]
        return evaluate_scores(
            scores[where],
            a,
            b,
            gate=name,
            metric=metric,
            retrieve=decided,
            lm_calls=lm_calls_per_decision(decided, answers_first=gate.answers_first),
            retrieves_first=gate.retrieves_first,
        )

    reports, start = {}, 0
    for key, rows in zip(datasets, parts):
        reports[key] = report(rows, slice(start, start + len(rows)))
        start += len(rows)
    reports[ALL] = report([r for rows in parts for r in rows], slice(0, start))
    return reports
