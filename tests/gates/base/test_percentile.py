"""Gates thresholded at a percentile of their fitting queries' out-of-fold scores."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.errors import GateLoadError, NotFittedError
from adaptive_gates.gates import BM25DifficultyGate
from adaptive_gates.gates.base.percentile import CV_FOLDS, LEVELS, FitPercentileGate, cross_fit
from adaptive_gates.persistence.saved_format import save_array


def test_cross_fit_scores_every_item_once_with_a_model_of_the_others():
    seen = []

    def score_fold(kept, held_out):
        assert not set(kept) & set(held_out)
        seen.append(held_out)
        return held_out * 10.0

    scores = cross_fit(50, seed=0, score_fold=score_fold)
    assert len(seen) == CV_FOLDS
    np.testing.assert_array_equal(scores, np.arange(50) * 10.0)
    few = []
    cross_fit(3, seed=0, score_fold=lambda k, h: few.append(h) or np.zeros(len(h)))
    assert len(few) == 3  # never more folds than items


@pytest.fixture(scope="module")
def fitted(qa_records):
    return BM25DifficultyGate().fit([r.question for r in qa_records[:120]])


def test_the_default_threshold_lets_half_the_fitting_queries_retrieve(fitted):
    assert isinstance(fitted, FitPercentileGate)
    assert fitted.calibration_ is None
    assert np.mean(fitted.fit_scores_ > fitted.threshold_) == pytest.approx(LEVELS["medium"], abs=0.02)


@pytest.mark.parametrize(("level", "rate"), [("scarce", 0.25), ("abundant", 0.75), (0.1, 0.1), (1.0, 1.0)])
def test_set_level_takes_a_name_or_a_rate(fitted, level, rate):
    try:
        assert fitted.set_level(level) is fitted
        assert fitted.calibration_.method == "rate"
        assert fitted.calibration_.target_rate == rate
        realised = np.mean(fitted.fit_scores_ > fitted.threshold_)
        assert fitted.calibration_.realised_rate == pytest.approx(realised)
        # tied scores (queries matching no fitting query) make some rates unreachable
        assert realised == pytest.approx(rate, abs=0.1)
    finally:
        fitted.reset_threshold()


@pytest.mark.parametrize("level", ["high", 1.5, -0.2])
def test_bad_levels_are_refused(fitted, level):
    with pytest.raises(ValueError, match=r"level must be one of|target_rate"):
        fitted.set_level(level)
    assert fitted.calibration_ is None


def test_an_unfitted_gate_has_no_fit_scores_or_level():
    gate = BM25DifficultyGate()
    assert not gate.is_fitted
    with pytest.raises(NotFittedError, match=r"fit_outcomes"):
        _ = gate.fit_scores_
    with pytest.raises(NotFittedError):
        gate.set_level("medium")


def test_fit_outcomes_fits_on_the_questions_alone(outcome_records):
    records = outcome_records[:25]
    gate = BM25DifficultyGate().fit_outcomes(records)
    assert gate.queries_ == [r.question for r in records]
    assert gate.fit_scores_.shape == (25,)


def test_saved_fit_scores_round_trip(fitted, tmp_path):
    loaded = BM25DifficultyGate.load(fitted.save(tmp_path / "gate"))
    np.testing.assert_array_equal(loaded.fit_scores_, fitted.fit_scores_)
    assert loaded.threshold_ == fitted.threshold_


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.zeros(119), "holds 119 scores for 120"),
        (np.full(120, np.nan), "must hold finite scores"),
        (np.zeros((12, 10)), "must hold finite scores"),
        (np.zeros(0), "must hold finite scores"),
    ],
)
def test_bad_fit_scores_files_are_refused(tmp_path, bad, message):
    save_array(tmp_path, "fit_scores.npy", bad)
    with pytest.raises(GateLoadError, match=message):
        BM25DifficultyGate()._load_fit_scores(tmp_path, 120)
