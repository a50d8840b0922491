"""Judge a gate on every question of several data sets, none of which it saw.

Cross-fitting: each fold's gate is fitted on the other folds and scores the held-out
one; its threshold is calibrated for the best accuracy on the other folds' out-of-fold
scores and outcomes, and it decides the held-out questions. The reports then hold
every question once, scored and decided by a gate that never saw its outcome.

The fit never sees a held-out outcome and the threshold is chosen on other questions'
outcomes, but their scores come from gates fitted with the held-out fold among others:
a slight, indirect look that a nested cross-fit (``fit_calibrated`` per fold) avoids
at six times the cost.

``evaluate_cross_fitted`` gives the report of one data set so (``adaptive-gates eval
--train FILE --folds K`` with no test file): what a gate fitted on a user's own
outcomes can be expected to do, without holding any of them aside for a test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..gates.base.folds import GateFactory, cross_fitted_folds
from ..gates.base.gate import Gate
from ..records.data import OutcomeRecord
from ..records.selfknowledge import Labels, outcome_scores
from .judging import graded_outcomes, judged_by
from .report import evaluate_scores
from .units import lm_calls_per_decision

#: The key of the report over all data sets together.
ALL = "all"


@dataclass(frozen=True)
class CrossFitted:
    """Every record scored and decided by a gate fitted on the other folds.

    ``scores`` and ``retrieve``: per record; ``fold``: the fold that held each record
    out; ``thresholds``: each fold's calibrated threshold, in fold order; ``gate``: the
    first fold's gate (it says what a decision costs: ``answers_first``,
    ``retrieves_first``)."""

    scores: np.ndarray
    retrieve: np.ndarray
    fold: np.ndarray
    thresholds: tuple[float, ...]
    gate: Gate


def cross_fit(
    factory: GateFactory,
    records: Sequence[OutcomeRecord],
    metric: str = "contains",
    folds: int = 5,
    seed: int = 0,
    *,
    labels: Labels = "gold",
    target_rate: float | None = None,
) -> CrossFitted:
    """Out-of-fold need scores and decisions of ``records``: each fold's gate is fitted
    (on ``labels``) on the other folds and its threshold calibrated on their
    out-of-fold scores, for ``target_rate`` or else for the best accuracy on their
    outcomes (see the module). Agreement labels rate every answer with retrieval
    right, so the best accuracy there is always to retrieve: without ``target_rate``
    each fold's gate keeps its own threshold (fitted on the same labels)."""
    scores, fitted = cross_fitted_folds(factory, records, metric, folds, seed, labels=labels)
    a, b = outcome_scores(records, metric)  # gold: the only labels calibrated for accuracy
    retrieve = np.zeros(len(records), dtype=bool)
    fold = np.zeros(len(records), dtype=np.int64)
    thresholds = []
    for index, (gate, kept, held_out) in enumerate(fitted):
        if target_rate is not None:
            gate.calibrate_scores(scores[kept], target_rate)
        elif labels == "gold":
            gate.calibrate_scores(scores[kept], correct_without=a[kept], correct_with=b[kept])
        retrieve[held_out] = gate.retrieves(scores[held_out])
        fold[held_out] = index
        thresholds.append(gate.threshold_)
    return CrossFitted(scores, retrieve, fold, tuple(thresholds), fitted[0][0])


def cross_fitted_decisions(
    factory: GateFactory, records: Sequence[OutcomeRecord], metric: str = "contains", folds: int = 5, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, Gate]:
    """Out-of-fold need scores and decisions of ``records`` (calibrated for the best
    accuracy, see the module), and the first fold's gate (which says what a decision
    costs: ``answers_first``, ``retrieves_first``)."""
    crossed = cross_fit(factory, records, metric, folds, seed)
    return crossed.scores, crossed.retrieve, crossed.gate


def evaluate_cross_fitted(
    factory: GateFactory,
    records: Sequence[OutcomeRecord],
    metric: str = "contains",
    folds: int = 5,
    seed: int = 0,
    *,
    name: str,
    labels: Labels = "gold",
    target_rate: float | None = None,
) -> tuple[dict[str, Any], CrossFitted]:
    """The report of a gate cross-fitted on one data set (``cross_fit``): every
    record scored and decided by a gate that never saw its outcome, judged against
    gold answers when every record has some, else by agreement (``judging``). The
    report adds ``n_folds``, ``seed``, ``thresholds`` (one per fold), ``labels`` and
    ``judged_by``; the cross-fit itself is returned too (each record's fold)."""
    crossed = cross_fit(factory, records, metric, folds, seed, labels=labels, target_rate=target_rate)
    judge = judged_by(records)
    a, b = graded_outcomes(records, metric, judge)
    report = evaluate_scores(
        crossed.scores,
        a,
        b,
        gate=name,
        metric=metric,
        retrieve=crossed.retrieve,
        target_rate=target_rate,
        lm_calls=lm_calls_per_decision(crossed.retrieve, answers_first=crossed.gate.answers_first),
        retrieves_first=crossed.gate.retrieves_first,
    )
    report.update(n_folds=folds, seed=seed, thresholds=list(crossed.thresholds), labels=labels, judged_by=judge)
    return report, crossed


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
