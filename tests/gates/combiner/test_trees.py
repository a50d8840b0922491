"""Boosted trees exported from scikit-learn and evaluated with numpy."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier

from adaptive_gates.errors import GateLoadError
from adaptive_gates.gates.combiner.trees import NODE_COLUMNS, TreeEnsemble
from adaptive_gates.persistence.saved_format import save_array
from adaptive_gates.records.selfknowledge import outcome_scores


@pytest.fixture(scope="module")
def data(outcome_records):
    records = outcome_records[:300]
    a, b = outcome_scores(records, "contains")
    x = np.array([[len(r.question), len(r.question.split()), len(r.answers)] for r in records], dtype=np.float64)
    x[::17, 1] = np.nan  # missing values take the side training chose
    return x, (b > a).astype(int) | (a == 0).astype(int)


@pytest.fixture(scope="module")
def model(data):
    x, y = data
    return HistGradientBoostingClassifier(max_iter=15, max_depth=3, random_state=0).fit(x, y)


def test_the_export_scores_as_scikit_learn_does(model, data):
    x, _ = data
    trees = TreeEnsemble.from_sklearn(model, n_features=3)
    assert trees.n_trees == model.n_iter_
    assert trees.nodes.shape[1] == len(NODE_COLUMNS)
    np.testing.assert_allclose(trees.raw(x), model.decision_function(x), atol=1e-9)
    np.testing.assert_allclose(trees.probability(x), model.predict_proba(x)[:, 1], atol=1e-9)


def test_rows_of_another_width_are_refused(model, data):
    trees = TreeEnsemble.from_sklearn(model, n_features=3)
    with pytest.raises(ValueError, match=r"expected rows of 3 features"):
        trees.raw(data[0][:, :2])
    with pytest.raises(ValueError, match=r"expected rows of 3 features"):
        trees.raw(data[0][0])


def test_only_binary_numeric_classifiers_export(data):
    x, y = data
    three = HistGradientBoostingClassifier(max_iter=3).fit(x, y + (np.arange(len(y)) % 3 == 0))
    with pytest.raises(ValueError, match=r"has 3 classes"):
        TreeEnsemble.from_sklearn(three, n_features=3)
    categorical = np.c_[np.arange(len(y)) % 4, x[:, :1]]
    model = HistGradientBoostingClassifier(max_iter=3, categorical_features=[0]).fit(categorical, y)
    with pytest.raises(ValueError, match=r"categorical splits"):
        TreeEnsemble.from_sklearn(model, n_features=2)


def test_saved_trees_load_and_score_the_same(model, data, tmp_path):
    trees = TreeEnsemble.from_sklearn(model, n_features=3)
    state = trees.save(tmp_path, "helps")
    assert state["columns"] == list(NODE_COLUMNS)
    loaded = TreeEnsemble.load(tmp_path, state, "helps", 3, "state.trees")
    np.testing.assert_array_equal(loaded.raw(data[0]), trees.raw(data[0]))
    with pytest.raises(GateLoadError, match=r"a split on a feature outside 0..1"):
        TreeEnsemble.load(tmp_path, state, "helps", 2, "state.trees")


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (None, "'state.trees.baseline' must be a finite number"),
        ({"baseline": True}, "baseline' must be a finite number"),
        ({"baseline": float("inf")}, "baseline' must be a finite number"),
        ({"baseline": 0.1, "columns": ["feature"]}, "'state.trees.columns' must be"),
    ],
)
def test_malformed_states_are_refused(tmp_path, state, message):
    with pytest.raises(GateLoadError, match=message):
        TreeEnsemble.load(tmp_path, state, "t", 3, "state.trees")


def _leaf(value):
    return [0, 0, 0, 0, 1, 0, value]


def _tables():
    split = [0, 0.5, 1, 2, 0, 1, 0]  # feature 0 <= 0.5 goes to node 1, else node 2
    good = [split, _leaf(-1.0), _leaf(2.0)]
    loop = [[0, 0.5, 0, 2, 0, 1, 0], _leaf(-1.0), _leaf(2.0)]
    outside = [[0, 0.5, 1, 3, 0, 1, 0], _leaf(-1.0), _leaf(2.0)]
    flag = [split, [0, 0, 0, 0, 2, 0, 1.0], _leaf(2.0)]
    fraction = [[0, 0.5, 1.5, 2, 0, 1, 0], _leaf(-1.0), _leaf(2.0)]
    nan = [split, _leaf(np.nan), _leaf(2.0)]
    return good, {
        "a child that is not a later node": loop,
        "not a later node of its own tree": outside,
        "a flag that is not 0 or 1": flag,
        "not a whole number": fraction,
        "non-finite values": nan,
    }


def test_a_hand_made_tree_scores_and_bad_tables_are_refused(tmp_path):
    good, bad = _tables()
    state = {"baseline": 0.5, "columns": list(NODE_COLUMNS)}
    save_array(tmp_path, "t_offsets.npy", np.array([0, 3], dtype=np.int64))
    save_array(tmp_path, "t_nodes.npy", np.array(good, dtype=np.float64))
    trees = TreeEnsemble.load(tmp_path, state, "t", 1, "state.trees")
    np.testing.assert_array_equal(trees.raw(np.array([[0.0], [1.0], [np.nan]])), [-0.5, 2.5, -0.5])
    for message, table in bad.items():
        save_array(tmp_path, "t_nodes.npy", np.array(table, dtype=np.float64))
        with pytest.raises(GateLoadError, match=message):
            TreeEnsemble.load(tmp_path, state, "t", 1, "state.trees")
    save_array(tmp_path, "t_nodes.npy", np.array(good, dtype=np.float32))
    with pytest.raises(GateLoadError, match=r"float64 values"):
        TreeEnsemble.load(tmp_path, state, "t", 1, "state.trees")
    for offsets, message in [([1, 3], "starting at 0"), ([0, 0, 3], "must increase"), ([0.0, 3.0], "integer offsets")]:
        save_array(tmp_path, "t_offsets.npy", np.array(offsets))
        with pytest.raises(GateLoadError, match=message):
            TreeEnsemble.load(tmp_path, state, "t", 1, "state.trees")
