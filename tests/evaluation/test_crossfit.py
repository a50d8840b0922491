"""Cross-fitted reports: every question judged by a gate that never saw its outcome."""

import dataclasses

import numpy as np
import pytest

from adaptive_gates import PopularityGate, outcome_scores
from adaptive_gates.evaluation import ALL, cross_fitted_decisions, cross_fitted_reports, evaluate_scores
from adaptive_gates.gates.base.folds import fold_splits


@pytest.fixture(scope="module")
def two_sets(outcome_records):
    """Two data sets of real outcome records (Llama-3.1-8B on NQ)."""
    return {"first": outcome_records[:60], "second": outcome_records[60:140]}


def _with_outcome(record, without: bool, with_: bool):
    """The record with its answers set so that it is right (or not) without and with retrieval."""
    answer = lambda right: record.answers[0] if right else "no idea"  # noqa: E731
    return dataclasses.replace(record, pred_no_retrieval=answer(without), pred_one_retrieval=answer(with_))


def test_a_decision_does_not_depend_on_its_own_outcome(outcome_records):
    # The popularity gate's scores ignore outcomes, so only the thresholds could carry
    # a held-out outcome into a decision. One fold's questions are made all "retrieval
    # helps", then all "retrieval hurts": that fold's decisions must not move.
    records = outcome_records[:100]
    _, held_out = next(fold_splits(len(records), 4, 0))
    runs = []
    for without, with_ in ((False, True), (True, False)):
        changed = list(records)
        for i in held_out:
            changed[i] = _with_outcome(records[i], without, with_)
        runs.append(cross_fitted_decisions(PopularityGate, changed, folds=4))
    (scores, helps, gate), (again, hurts, _) = runs
    assert gate.answers_first is False and gate.retrieves_first is False
    np.testing.assert_array_equal(again, scores)
    np.testing.assert_array_equal(helps[held_out], hurts[held_out])


def test_reports_per_data_set_and_over_all(two_sets):
    reports = cross_fitted_reports(PopularityGate, two_sets, pooled=False, name="popularity", folds=3)
    assert list(reports) == ["first", "second", ALL]
    decided = {key: cross_fitted_decisions(PopularityGate, rows, folds=3) for key, rows in two_sets.items()}
    for key, rows in two_sets.items():
        scores, retrieve, _ = decided[key]
        a, b = outcome_scores(rows)
        assert reports[key] == evaluate_scores(scores, a, b, gate="popularity", metric="contains", retrieve=retrieve)
    overall = reports[ALL]
    assert overall["n"] == 140 and overall["lm_calls"] == 1.0
    assert overall["in_accuracy"] == pytest.approx(
        (60 * reports["first"]["in_accuracy"] + 80 * reports["second"]["in_accuracy"]) / 140
    )


def test_pooled_reports_cut_the_folds_across_the_data_sets(two_sets):
    reports = cross_fitted_reports(PopularityGate, two_sets, pooled=True, name="popularity", folds=3)
    _, retrieve, _ = cross_fitted_decisions(PopularityGate, two_sets["first"] + two_sets["second"], folds=3)
    a, b = outcome_scores(two_sets["second"])
    assert reports["second"]["in_accuracy"] == pytest.approx(np.where(retrieve[60:], b, a).mean())
    assert reports[ALL]["retrieval_calls"] == pytest.approx(retrieve.mean())


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="no data sets"):
        cross_fitted_reports(PopularityGate, {}, pooled=True, name="p")
    with pytest.raises(ValueError, match="folds must be in"):
        cross_fitted_decisions(PopularityGate, [], folds=5)
