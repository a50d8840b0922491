"""The stacked gate's combiner: logistic heads over standardised features, as arrays."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from adaptive_gates.errors import GateLoadError
from adaptive_gates.gates.base.feedback import Feedback
from adaptive_gates.gates.combiner.logistic import (
    HEADS,
    Combiner,
    CombinerRows,
    feedback_outcomes,
    fit_combiner,
    head_outcomes,
    row_weights,
    standardisation,
    weighted_rows,
)
from adaptive_gates.persistence.saved_format import save_array
from adaptive_gates.records.selfknowledge import KNOWN, UNKNOWN, outcome_scores


@pytest.fixture(scope="module")
def rows(outcome_records):
    """Real outcome rows with two simple, real features of each question."""
    records = outcome_records[:200]
    a, b = outcome_scores(records, "contains")
    features = np.array([[len(r.question), len(r.question.split())] for r in records], dtype=np.float64)
    return [r.question for r in records], features, a, b


def test_head_outcomes_per_target():
    a, b = np.array([0.0, 1.0, 0.0, np.nan]), np.array([1.0, 1.0, 0.0, 1.0])
    gain = head_outcomes(a, b, "gain")
    np.testing.assert_array_equal(gain["with"], b)
    np.testing.assert_array_equal(gain["without"], a)
    helps = head_outcomes(a, b, "helps")["helps"]
    np.testing.assert_array_equal(helps[:3], [1.0, 0.0, 0.0])
    assert np.isnan(helps[3])


def test_feedback_teaches_one_head_per_observation():
    entries = [
        Feedback("q1", retrieved=True, correct=True),
        Feedback("q2", retrieved=False, correct=False, label=UNKNOWN),
        Feedback("q3", retrieved=False, correct=True, label=KNOWN),
    ]
    gain = feedback_outcomes(entries, "gain")
    np.testing.assert_array_equal(gain["with"][:1], [1.0])
    assert np.isnan(gain["with"][1:]).all()
    np.testing.assert_array_equal(gain["without"][1:], [0.0, 1.0])
    helps = feedback_outcomes(entries, "helps")["helps"]
    assert np.isnan(helps[0])
    np.testing.assert_array_equal(helps[1:], [1.0, 0.0])


def test_fractional_outcomes_become_weighted_rows():
    z = np.array([[0.0], [1.0], [2.0]])
    y = np.array([0.25, 1.0, np.nan])
    x, labels, weights = weighted_rows(z, y, None, "test")
    # positive rows weighted by y, negative rows by 1 - y; NaN and zero weights dropped
    assert sorted(zip(x[:, 0], labels, weights)) == [(0.0, 0.0, 0.75), (0.0, 1.0, 0.25), (1.0, 1.0, 1.0)]
    with pytest.raises(ValueError, match=r"test is 1 on every training row"):
        weighted_rows(z, np.array([1.0, 1.0, np.nan]), None, "test")
    with pytest.raises(ValueError, match=r"is missing on every training row"):
        weighted_rows(z, np.full(3, np.nan), None, "test")
    _, _, halved = weighted_rows(z, y, [0.5, 0.5, 0.5], "test")
    assert sorted(halved) == [0.125, 0.375, 0.5]


def test_row_weights_are_checked():
    np.testing.assert_array_equal(row_weights(None, 3), [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"one weight per row"):
        row_weights([1.0, 2.0], 3)
    with pytest.raises(ValueError, match=r"finite, non-negative"):
        row_weights([1.0, -1.0, 1.0], 3)
    with pytest.raises(ValueError, match=r"finite, non-negative"):
        row_weights([1.0, np.inf, 1.0], 3)


def test_standardisation_keeps_constant_columns_at_zero():
    mean, scale = standardisation(np.array([[1.0, 5.0], [3.0, 5.0]]))
    np.testing.assert_array_equal(mean, [2.0, 5.0])
    np.testing.assert_array_equal(scale, [1.0, 1.0])


def test_the_gain_combiner_matches_scikit_learn_on_real_rows(rows):
    _, features, a, b = rows
    combiner = fit_combiner(features, head_outcomes(a, b, "gain"), "gain", C=1.0)
    assert set(combiner.heads) == set(HEADS["gain"])
    z = (features - combiner.mean) / combiner.scale
    reference = LogisticRegression(C=1.0, max_iter=5000).fit(
        np.vstack([z, z]), np.r_[np.ones(200), np.zeros(200)], sample_weight=np.r_[b, 1 - b]
    )
    p = combiner.head_probabilities(features)
    np.testing.assert_allclose(p["with"], reference.predict_proba(z)[:, 1], atol=1e-6)
    np.testing.assert_allclose(combiner.score(features), p["with"] - p["without"])
    assert combiner.base_rate == pytest.approx(b.mean() - a.mean())


def test_the_helps_combiner_scores_a_probability(rows):
    _, features, a, b = rows
    combiner = fit_combiner(features, head_outcomes(a, b, "helps"), "helps", C=0.5)
    scores = combiner.score(features)
    assert np.all((scores > 0) & (scores < 1))
    assert combiner.base_rate == pytest.approx(np.mean(b > a))
    with pytest.raises(ValueError, match=r"has the heads"):
        fit_combiner(features, head_outcomes(a, b, "gain"), "helps", C=1.0)


def test_a_head_with_one_outcome_has_nothing_to_learn(rows):
    _, features, a, _ = rows
    with pytest.raises(ValueError, match=r"correctness with retrieval is 1 on every training row"):
        fit_combiner(features, {"with": np.ones(200), "without": a}, "gain", C=1.0)


def test_combiner_and_rows_round_trip(rows, tmp_path):
    questions, features, a, b = rows
    combiner = fit_combiner(features, head_outcomes(a, b, "gain"), "gain", C=1.0)
    state = combiner.save(tmp_path)
    loaded = Combiner.load(tmp_path, state, n_features=2)
    np.testing.assert_allclose(loaded.score(features), combiner.score(features))
    kept = CombinerRows(tuple(questions), features, a, b)
    rows_state = kept.save(tmp_path)
    assert rows_state == {"size": 200}
    back = CombinerRows.load(tmp_path, rows_state, n_features=2)
    assert back.questions == tuple(questions)
    np.testing.assert_array_equal(back.features, features)
    with pytest.raises(GateLoadError, match=r"rows_features.npy' must hold 200x3"):
        CombinerRows.load(tmp_path, rows_state, n_features=3)
    with pytest.raises(GateLoadError, match=r"'state.rows.size' is missing"):
        CombinerRows.load(tmp_path, {"size": 0}, n_features=2)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (None, "target' must be one of"),
        ({"target": "loss"}, "target' must be one of"),
        ({"target": "gain", "intercepts": {"with": 0.1}, "base_rate": 0.0}, "intercepts' must give a number per head"),
        ({"target": "helps", "intercepts": {"helps": True}, "base_rate": 0.0}, "intercepts' must give a number"),
        ({"target": "helps", "intercepts": {"helps": 0.1}}, "base_rate' is missing"),
        ({"target": "helps", "intercepts": {"helps": 0.1}, "base_rate": True}, "base_rate' is missing or not a number"),
    ],
)
def test_malformed_combiner_states_are_refused(tmp_path, state, message):
    with pytest.raises(GateLoadError, match=message):
        Combiner.load(tmp_path, state, n_features=2)


def test_bad_combiner_arrays_are_refused(tmp_path):
    state = {"target": "helps", "intercepts": {"helps": 0.0}, "base_rate": 0.2}
    save_array(tmp_path, "combiner_mean.npy", np.zeros(2))
    save_array(tmp_path, "combiner_helps.npy", np.ones(2))
    save_array(tmp_path, "combiner_scale.npy", np.array([1.0, 0.0]))
    with pytest.raises(GateLoadError, match=r"must hold positive values"):
        Combiner.load(tmp_path, state, n_features=2)
    save_array(tmp_path, "combiner_scale.npy", np.array([1.0, np.nan]))
    with pytest.raises(GateLoadError, match=r"must hold 2 finite values"):
        Combiner.load(tmp_path, state, n_features=2)
