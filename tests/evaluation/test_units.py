"""A gate's figures in the field's units."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.evaluation.curves import Curve, gate_curve, oracle_curve
from adaptive_gates.evaluation.units import calls_to_match_always, field_units, lm_calls_per_decision
from adaptive_gates.records.selfknowledge import outcome_scores


def test_calls_to_match_always_is_the_first_rate_reaching_it():
    curve = Curve(np.array([0.0, 0.25, 0.5, 0.75, 1.0]), np.array([0.4, 0.5, 0.7, 0.65, 0.6]))
    assert calls_to_match_always(curve, 0.6) == 0.5
    assert calls_to_match_always(curve, 0.3) == 0.0
    late = Curve(np.array([0.0, 0.5, 1.0]), np.array([0.1, 0.2, 0.6]))
    assert calls_to_match_always(late, 0.6) == 1.0


def test_lm_calls_per_decision():
    retrieve = np.array([True, False, True, False])
    np.testing.assert_array_equal(lm_calls_per_decision(retrieve), [1, 1, 1, 1])
    np.testing.assert_array_equal(lm_calls_per_decision(retrieve, answers_first=True), [2, 1, 2, 1])
    np.testing.assert_array_equal(
        lm_calls_per_decision(retrieve, gate_calls=[2, 2, 0, 0], drafts=[True, True, False, False]), [3, 2, 1, 1]
    )
    with pytest.raises(ValueError, match=r"got 3 gate call counts and 4 draft flags for 4 decisions"):
        lm_calls_per_decision(retrieve, gate_calls=[1, 1, 1])


def test_field_units_on_real_outcomes(outcome_records):
    a, b = outcome_scores(outcome_records[:200], "contains")
    oracle = oracle_curve(a, b)
    retrieve = b > a
    units = field_units(oracle, a, b, retrieve)
    assert units["in_accuracy"] == pytest.approx(np.maximum(a, b).mean())
    assert units["retrieval_calls"] == pytest.approx(retrieve.mean())
    assert units["lm_calls"] == 1.0
    assert units["calls_to_match_always"] <= retrieve.mean() + 1 / len(a)
    band = units["random_band"]
    assert band["retrieval_rate"] == pytest.approx(retrieve.mean())
    low, high = band["accuracy"]
    assert low <= high < units["in_accuracy"]  # the oracle's decisions beat random gates
    first = field_units(
        gate_curve(np.zeros(200), a, b), a, b, retrieve, lm_calls=np.full(200, 2.0), retrieves_first=True
    )
    assert first["retrieval_calls"] == 1.0 and first["lm_calls"] == 2.0


def test_mismatched_decisions_or_calls_are_refused(outcome_records):
    a, b = outcome_scores(outcome_records[:10], "contains")
    curve = oracle_curve(a, b)
    with pytest.raises(ValueError, match=r"got 9 decisions for 10 outcomes"):
        field_units(curve, a, b, np.zeros(9, bool))
    with pytest.raises(ValueError, match=r"got 3 LM call counts for 10 outcomes"):
        field_units(curve, a, b, np.zeros(10, bool), lm_calls=np.ones(3))
