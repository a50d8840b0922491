"""Accuracy against retrieval rate, ties at their expected gain."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.evaluation.curves import Curve, as_outcomes, gap_capture, gate_curve, oracle_curve, random_auc
from adaptive_gates.records.selfknowledge import outcome_scores


@pytest.fixture(scope="module")
def outcomes(outcome_records):
    return outcome_scores(outcome_records[:200], "contains")


def test_the_curve_runs_from_never_to_always_retrieve(outcomes):
    a, b = outcomes
    scores = np.random.default_rng(0).normal(size=a.size)
    curve = gate_curve(scores, a, b)
    assert curve.rates[0] == 0 and curve.rates[-1] == 1 and curve.rates.size == a.size + 1
    assert curve.accuracy[0] == pytest.approx(a.mean())
    assert curve.accuracy[-1] == pytest.approx(b.mean())
    j = 37
    top = np.argsort(-scores)[:j]
    retrieve = np.zeros(a.size, bool)
    retrieve[top] = True
    assert curve.accuracy[j] == pytest.approx(np.where(retrieve, b, a).mean())


def test_ties_get_their_expected_gain():
    a, b = np.array([0.0, 0.0, 1.0, 0.0]), np.array([1.0, 0.0, 0.0, 0.0])
    curve = gate_curve(np.zeros(4), a, b)  # one tie: a straight line
    np.testing.assert_allclose(curve.accuracy, np.linspace(0.25, 0.25, 5))
    ordered = gate_curve(np.array([3.0, 2.0, 1.0, 0.0]), a, b)
    np.testing.assert_allclose(ordered.accuracy, [0.25, 0.5, 0.5, 0.25, 0.25])


def test_the_oracle_bounds_every_gate_and_random_is_the_chord(outcomes):
    a, b = outcomes
    oracle = oracle_curve(a, b)
    for seed in range(3):
        gate = gate_curve(np.random.default_rng(seed).normal(size=a.size), a, b)
        assert np.all(gate.accuracy <= oracle.accuracy + 1e-12)
    assert random_auc(a, b) == pytest.approx((a.mean() + b.mean()) / 2)
    constant = gate_curve(np.ones(a.size), a, b)
    assert constant.auc == pytest.approx(random_auc(a, b))
    assert gap_capture(oracle.auc, random_auc(a, b), oracle.auc) == pytest.approx(1.0)
    assert gap_capture(constant.auc, random_auc(a, b), oracle.auc) == pytest.approx(0.0)
    assert gap_capture(0.5, 0.5, 0.5) is None


def test_curve_helpers():
    curve = Curve(np.array([0.0, 0.5, 1.0]), np.array([0.2, 0.6, 0.4]))
    assert curve.auc == pytest.approx(0.25 * (0.2 + 0.6) + 0.25 * (0.6 + 0.4))
    assert curve.accuracy_at(0.25) == pytest.approx(0.4)
    assert curve.as_list(2) == [[0.0, 0.2], [0.5, 0.6], [1.0, 0.4]]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"two non-empty 1-d arrays"):
        as_outcomes(np.array([]), np.array([]))
    with pytest.raises(ValueError, match=r"two non-empty 1-d arrays"):
        as_outcomes(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match=r"got 2 scores for 3 outcomes"):
        gate_curve(np.zeros(2), np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match=r"scores must be finite"):
        gate_curve(np.array([0.0, np.nan]), np.zeros(2), np.ones(2))
