"""Seeded K-fold splits and cross-fitted need scores."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.gates import BM25DifficultyGate, SKRKnnGate
from adaptive_gates.gates.base.folds import cross_fitted_folds, cross_fitted_scores, fit_gate, fold_splits


def test_folds_partition_the_items_and_depend_on_the_seed():
    splits = list(fold_splits(23, 5, seed=3))
    assert len(splits) == 5
    held = np.concatenate([h for _, h in splits])
    assert sorted(held.tolist()) == list(range(23))
    assert sorted(len(h) for _, h in splits) == [4, 4, 5, 5, 5]
    for kept, held_out in splits:
        assert np.all(np.diff(kept) > 0)
        assert set(kept) | set(held_out) == set(range(23))
        assert not set(kept) & set(held_out)
    again = list(fold_splits(23, 5, seed=3))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(splits, again))
    other = list(fold_splits(23, 5, seed=4))
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(splits, other))


def test_one_fold_keeps_nothing():
    ((kept, held_out),) = fold_splits(4, 1, seed=0)
    assert kept.size == 0 and sorted(held_out.tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("folds", [0, 6, 2.0, True, "3"])
def test_bad_fold_counts_are_refused(folds):
    with pytest.raises(ValueError, match=r"folds must be an int in \[1, 5\]"):
        list(fold_splits(5, folds, seed=0))


def test_fit_gate_fits_a_fresh_gate_and_records_what_it_learnt_from(outcome_records):
    records = outcome_records[:30]
    gate = fit_gate(BM25DifficultyGate, records, "contains", sources=("adarague-nq",))
    assert gate.is_fitted
    assert gate.queries_ == [r.question for r in records]
    assert gate.fitted_on_.records == 30
    assert gate.fitted_on_.labels == "gold"
    assert gate.fitted_on_.sources == ("adarague-nq",)
    agreed = fit_gate(BM25DifficultyGate, records, "contains", labels="agreement")
    assert agreed.fitted_on_.labels == "agreement"


def test_cross_fitted_scores_come_from_gates_that_never_saw_the_record(outcome_records):
    records = outcome_records[:40]
    scores, folds = cross_fitted_folds(BM25DifficultyGate, records, folds=4, seed=1)
    assert scores.shape == (40,) and np.all(np.isfinite(scores))
    assert len(folds) == 4
    for gate, kept, held_out in folds:
        seen = set(gate.queries_)
        assert seen == {records[i].question for i in kept}
        np.testing.assert_allclose(scores[held_out], gate.score_records([records[i] for i in held_out]))
    np.testing.assert_array_equal(scores, cross_fitted_scores(BM25DifficultyGate, records, folds=4, seed=1))
    # in-sample, a record matches itself and looks familiar: out-of-fold it does not
    in_sample = BM25DifficultyGate().fit([r.question for r in records]).score([r.question for r in records])
    assert np.mean(scores) > np.mean(in_sample)


def test_cross_fitting_a_gate_that_learns_from_labels(outcome_records, cached_embedder):
    records = outcome_records[:30]
    scores = cross_fitted_scores(lambda: SKRKnnGate(cached_embedder, k=3), records, folds=3, seed=0)
    assert scores.shape == (30,)
    assert np.all((scores >= 0) & (scores <= 1))


@pytest.mark.parametrize("folds", [1, 31])
def test_cross_fitting_needs_two_to_n_folds(outcome_records, folds):
    with pytest.raises(ValueError, match=r"folds must be in \[2, 30\]"):
        cross_fitted_scores(BM25DifficultyGate, outcome_records[:30], folds=folds)
