"""Thresholds for a retrieval rate or for accuracy on outcome records."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from adaptive_gates.gates.base.calibration import (
    MIN_CALIBRATION_QUESTIONS,
    SCORE_SAMPLE_SIZE,
    Calibration,
    CalibrationWarning,
    first_caller_outside_package,
    threshold_for_objective,
    threshold_for_rate,
)
from adaptive_gates.records.selfknowledge import outcome_scores


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.3, 0.5, 0.9, 1.0])
def test_the_rate_threshold_retrieves_that_share_of_distinct_scores(rate):
    scores = np.random.default_rng(0).normal(size=200)
    calibration = threshold_for_rate(scores, rate)
    realised = float(np.mean(scores > calibration.threshold))
    assert realised == pytest.approx(rate, abs=1 / 200)
    assert calibration.realised_rate == pytest.approx(realised)
    assert calibration.method == "rate"
    assert calibration.n == 200
    assert calibration.target_rate == rate


def test_ties_take_the_closest_reachable_rate_and_fewer_on_a_draw():
    scores = np.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    # reachable rates: 0, 4/6, 1; 0.5 is closer to 4/6 than to 0
    calibration = threshold_for_rate(scores, 0.5)
    assert calibration.realised_rate == pytest.approx(4 / 6)
    assert np.mean(scores > calibration.threshold) == pytest.approx(4 / 6)
    # a draw between 0 and 1 retrieves fewer
    tied = threshold_for_rate(np.array([2.0, 2.0]), 0.5)
    assert tied.realised_rate == 0.0
    assert not np.any(np.array([2.0, 2.0]) > tied.threshold)


@pytest.mark.parametrize("rate", [-0.1, 1.5, math.nan])
def test_a_rate_outside_zero_one_is_refused(rate):
    with pytest.raises(ValueError, match=r"target_rate"):
        threshold_for_rate(np.arange(5.0), rate)


def test_empty_or_non_finite_scores_are_refused():
    with pytest.raises(ValueError, match=r"at least one"):
        threshold_for_rate(np.array([]), 0.5)
    with pytest.raises(ValueError, match=r"finite"):
        threshold_for_rate(np.array([0.1, math.nan]), 0.5)
    with pytest.raises(ValueError, match=r"finite"):
        threshold_for_objective(np.array([0.1, math.inf]), [0, 1], [1, 1])


def test_the_objective_threshold_beats_every_other_cut_on_real_outcomes(outcome_records):
    records = outcome_records[:200]
    a, b = outcome_scores(records, "contains")
    scores = np.array([len(r.question) for r in records], dtype=float)  # a crude, real need score
    calibration = threshold_for_objective(scores, a, b)
    chosen = scores > calibration.threshold
    accuracy = float(np.mean(np.where(chosen, b, a)))
    assert calibration.accuracy == pytest.approx(accuracy)
    for t in np.unique(scores):
        assert np.mean(np.where(scores > t, b, a)) <= accuracy + 1e-12
    assert np.mean(a) <= accuracy + 1e-12 and np.mean(b) <= accuracy + 1e-12
    capped = threshold_for_objective(scores, a, b, max_rate=0.1)
    assert capped.realised_rate <= 0.1
    assert capped.max_rate == 0.1 and capped.method == "objective"


def test_equally_accurate_thresholds_prefer_retrieving_least():
    # retrieval never changes correctness: every cut is equally accurate
    calibration = threshold_for_objective(np.array([0.9, 0.5, 0.1]), [1, 0, 1], [1, 0, 1])
    assert calibration.realised_rate == 0.0
    assert calibration.accuracy == pytest.approx(2 / 3)


def test_graded_outcomes_and_bad_outcomes():
    calibration = threshold_for_objective(np.array([0.8, 0.2]), [0.0, 0.5], [1.0, 0.25])
    assert calibration.realised_rate == 0.5
    assert calibration.accuracy == pytest.approx((1.0 + 0.5) / 2)
    with pytest.raises(ValueError):
        threshold_for_objective(np.array([0.8, 0.2]), [0, 2], [1, 1])
    with pytest.raises(ValueError, match=r"2 scores for 3/2"):
        threshold_for_objective(np.array([0.8, 0.2]), [0, 1, 1], [1, 1])
    with pytest.raises(ValueError, match=r"max_rate"):
        threshold_for_objective(np.array([0.8, 0.2]), [0, 1], [1, 1], max_rate=1.2)


def test_the_score_sample_is_capped_sorted_and_survives_a_round_trip():
    scores = np.random.default_rng(1).uniform(size=1000)
    calibration = threshold_for_rate(scores, 0.3)
    sample = calibration.score_sample
    assert sample is not None and len(sample) == SCORE_SAMPLE_SIZE
    assert list(sample) == sorted(sample)
    assert sample[0] == scores.min() and sample[-1] == scores.max()
    data = calibration.to_dict()
    assert isinstance(data["score_sample"], list)
    assert Calibration.from_dict(data) == calibration
    small = threshold_for_rate(np.array([3.0, 1.0, 2.0]), 0.5)
    assert small.score_sample == (1.0, 2.0, 3.0)


def test_threshold_at_rate_reads_the_kept_sample():
    scores = np.arange(100, dtype=float)
    calibration = threshold_for_rate(scores, 0.5)
    assert np.mean(scores > calibration.threshold_at_rate(0.2)) == pytest.approx(0.2)
    assert np.mean(scores > calibration.threshold_at_rate(0.8)) == pytest.approx(0.8)
    old = Calibration("rate", 0.5, 100, 0.5, target_rate=0.5)
    with pytest.raises(ValueError, match=r"kept no scores"):
        old.threshold_at_rate(0.2)
    assert Calibration.from_dict(old.to_dict()).score_sample is None


def test_too_few_questions_warn_at_the_callers_line():
    with pytest.warns(CalibrationWarning, match=r"calibrated on 3 questions") as caught:
        threshold_for_rate(np.array([0.1, 0.2, 0.3]), 0.3).warn_if_too_few()
    assert caught[0].filename == __file__
    with pytest.warns(CalibrationWarning, match=r"1 question,.*best accuracy"):
        threshold_for_objective(np.array([0.5]), [0], [1]).warn_if_too_few()
    enough = threshold_for_rate(np.arange(float(MIN_CALIBRATION_QUESTIONS)), 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enough.warn_if_too_few()


def test_first_caller_outside_package_from_test_code_is_the_caller():
    assert first_caller_outside_package() == 1
