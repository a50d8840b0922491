"""The band random gates reach: what a gate's figure must clear to mean anything."""

import numpy as np
import pytest

from adaptive_gates.evaluation import evaluate_scores, null_accuracies, null_gap_captures, random_band

# Retrieval hurts question 0 and helps questions 1-3.
A = np.array([1.0, 0.0, 0.0, 0.0])
B = np.array([0.0, 1.0, 1.0, 1.0])


def test_random_accuracy_at_one_call_is_the_two_possible_outcomes():
    accuracies = null_accuracies(A, B, 1, np.random.default_rng(0), draws=2000)
    # Retrieving for question 0 gives 0/4, for any other 2/4: drawn about 1 in 4 times.
    assert set(np.round(accuracies, 6)) == {0.0, 0.5}
    assert np.mean(accuracies == 0.0) == pytest.approx(0.25, abs=0.03)


def test_band_holds_the_random_outcomes_and_the_rate():
    band = random_band(A, B, np.array([False, True, False, False]), draws=2000)
    assert band["accuracy"] == [0.0, 0.5]
    assert band["retrieval_rate"] == 0.25 and band["level"] == 0.95 and band["draws"] == 2000
    low, high = band["gap_capture"]
    assert -1 <= low < 0 < high <= 1


def test_random_gap_captures_centre_on_zero_and_the_oracle_lies_above_the_band():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 2, 200).astype(float), rng.integers(0, 2, 200).astype(float)
    captures = null_gap_captures(a, b, np.random.default_rng(2), draws=500)
    assert captures.shape == (500,) and abs(captures.mean()) < 0.03
    band = random_band(a, b, draws=500)
    oracle = evaluate_scores(b - a, a, b, gate="oracle", metric="contains")
    assert oracle["gap_capture"] == pytest.approx(1.0) and oracle["gap_capture"] > band["gap_capture"][1]
    assert "accuracy" not in band


def test_band_is_reproducible_from_its_seed_and_narrows_with_more_questions():
    rng = np.random.default_rng(3)
    small = [rng.integers(0, 2, 50).astype(float) for _ in range(2)]
    large = [rng.integers(0, 2, 800).astype(float) for _ in range(2)]
    assert random_band(*small, seed=5) == random_band(*small, seed=5)
    width = [np.diff(random_band(*ab, draws=400)["gap_capture"])[0] for ab in (small, large)]
    assert width[1] < width[0] / 2


def test_no_gap_capture_band_where_retrieval_changes_nothing():
    same = np.array([1.0, 0.0, 1.0])
    assert null_gap_captures(same, same, np.random.default_rng(0)).size == 0
    band = random_band(same, same, np.array([True, False, False]))
    assert band["gap_capture"] is None and band["accuracy"] == [pytest.approx(2 / 3)] * 2


@pytest.mark.parametrize("kwargs", [{"level": 1.0}, {"level": 0.0}, {"draws": 0}])
def test_bad_band_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        random_band(A, B, **kwargs)


def test_decisions_of_another_length_are_refused():
    with pytest.raises(ValueError, match="3 decisions for 4 outcomes"):
        random_band(A, B, np.array([True, False, True]))
    with pytest.raises(ValueError, match="n_retrieve"):
        null_accuracies(A, B, 5, np.random.default_rng(0))
