"""The learning curve (gap capture against the outcomes a gate learned from) and the
judging rules of reports, on the bundled AdaRAGUE outcomes (Llama-3.1-8B on NQ)."""

import dataclasses
import warnings

import numpy as np
import pytest

from adaptive_gates import PopularityGate, SKRKnnGate, StackedGate
from adaptive_gates.evaluation import (
    LearningCurve,
    LearningPoint,
    ModelMismatchWarning,
    cross_fit,
    default_sizes,
    evaluate_fitted,
    evaluate_scores,
    fit_calibrated,
    graded_outcomes,
    judged_by,
    learning_curve,
    model_mismatch,
    plot_learning_curve,
    random_band,
)
from adaptive_gates.gates.base.folds import cross_fitted_scores, fit_gate, fold_splits
from adaptive_gates.records.selfknowledge import agreement_records, outcome_scores

OTHER_LLM = "acme/Other-LLM-7B"


def quick_gate(**params):
    return StackedGate(members="", embedding=False, model="logistic", **params)


@pytest.fixture(scope="module")
def records(outcome_records):
    return outcome_records[:200]


@pytest.fixture(scope="module")
def without_gold(outcome_records):
    return [dataclasses.replace(r, answers=[], extra={"llm": OTHER_LLM}) for r in outcome_records[200:320]]


def test_default_sizes_double_from_fifty_up_to_all_records():
    assert default_sizes(500) == [50, 100, 200, 400, 500]
    assert default_sizes(120, 3) == [50, 100, 120]
    assert default_sizes(30, 5) == [30]
    with pytest.raises(ValueError, match="7 records are too few for a 4-fold learning curve"):
        default_sizes(7, 4)


def test_each_point_cross_fits_a_subset_drawn_per_seed(records):
    curve = learning_curve(PopularityGate, records, name="popularity", sizes=[50, 200], folds=4, seeds=(0, 1, 2))
    assert [p.size for p in curve.points] == [50, 200] and curve.seeds == (0, 1, 2)
    assert curve.labels == "gold" and curve.judged_by == "gold" and curve.folds == 4
    small, full = curve.points
    a, b = outcome_scores(records)
    # all records: each seed's figure is the cross-fit of all of them with that seed's folds
    for seed, capture in zip(curve.seeds, full.gap_captures):
        scores = cross_fitted_scores(PopularityGate, records, "contains", 4, seed)
        assert capture == pytest.approx(evaluate_scores(scores, a, b, gate="p", metric="c")["gap_capture"])
    # 50 records: a subset of its own per seed
    for seed, capture in zip(curve.seeds, small.gap_captures):
        pick = np.sort(np.random.default_rng(seed).permutation(len(records))[:50])
        subset = [records[i] for i in pick]
        scores = cross_fitted_scores(PopularityGate, subset, "contains", 4, seed)
        assert capture == pytest.approx(evaluate_scores(scores, a[pick], b[pick], gate="p", metric="c")["gap_capture"])
    assert len(set(small.gap_captures)) == 3
    assert small.mean == pytest.approx(np.mean(small.gap_captures))
    assert small.spread == pytest.approx(np.std(small.gap_captures, ddof=1))
    # chance spreads wider on fewer questions; its band is the mean of the seeds' bands
    assert small.random_band[0] < full.random_band[0] < 0 < full.random_band[1] < small.random_band[1]
    bands = [random_band(a, b, seed=seed)["gap_capture"] for seed in curve.seeds]
    assert full.random_band == pytest.approx(tuple(np.mean(bands, axis=0)))


def test_a_learning_gate_on_few_records_and_its_table(records, cached_embedder):
    curve = learning_curve(
        lambda: SKRKnnGate(embedder=cached_embedder), records, name="skr-knn", sizes=[60, 200], folds=5, seeds=(0, 1)
    )
    table = curve.table().splitlines()
    assert table[0] == (
        "learning curve of skr-knn: 5-fold cross-fitted gap capture, seeds 0,1 (gold labels, judged by gold, contains)"
    )
    for line, point in zip(table[2:], curve.points):
        size, mean, spread, *_ = line.split()
        assert (int(size), mean, spread) == (point.size, f"{point.mean:+.3f}", f"{point.spread:.3f}")
    assert curve.to_dict()["points"][1]["gap_captures"] == list(curve.points[1].gap_captures)


def test_a_learning_curve_on_records_without_gold_is_fitted_and_judged_by_agreement(without_gold):
    factory = lambda: quick_gate(target="helps")  # noqa: E731
    curve = learning_curve(factory, without_gold, name="stacked", labels="agreement", sizes=[120], folds=3, seeds=(4,))
    assert curve.labels == "agreement" and curve.judged_by == "agreement"
    scores = cross_fitted_scores(factory, without_gold, "contains", 3, 4, labels="agreement")
    a, b = outcome_scores(agreement_records(without_gold))
    expected = evaluate_scores(scores, a, b, gate="s", metric="c")["gap_capture"]
    assert curve.points[0].gap_captures == pytest.approx((expected,))


def test_sizes_outside_the_records_are_refused(records):
    with pytest.raises(ValueError, match=r"sizes must lie in \[10, 200\]"):
        learning_curve(PopularityGate, records, name="p", sizes=[8, 100])
    with pytest.raises(ValueError, match=r"sizes must lie in \[10, 200\]"):
        learning_curve(PopularityGate, records, name="p", sizes=[100, 201])


def test_the_plot_is_written_and_a_curve_without_figures_refused(records, tmp_path):
    curve = learning_curve(PopularityGate, records, name="popularity", sizes=[50, 200], folds=4, seeds=(0, 1))
    assert plot_learning_curve(curve, tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")
    empty = LearningCurve("p", "contains", "gold", "gold", 4, (0,), (LearningPoint(50, (), None),))
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_learning_curve(empty, tmp_path / "e.png")
    assert not (tmp_path / "e.png").exists()


def test_judging_reads_gold_answers_only_when_every_record_has_some(records, without_gold):
    assert judged_by(records) == "gold" and judged_by(without_gold) == "agreement"
    assert judged_by([*records[:5], without_gold[0]]) == "agreement"
    a, b = graded_outcomes(records, "em", "agreement")
    expected = outcome_scores(agreement_records(records), "em")
    np.testing.assert_array_equal(a, expected[0])
    np.testing.assert_array_equal(b, expected[1])


def test_a_gate_judged_on_another_models_answers_is_warned_of(records, without_gold):
    gate = fit_gate(quick_gate, records, "contains", sources=["nq"])
    assert model_mismatch(gate.fitted_on_, records) is None
    with pytest.warns(
        ModelMismatchWarning,
        match=f"fitted on outcomes of meta-llama/Llama-3.1-8B-Instruct, the test records hold answers of {OTHER_LLM}",
    ):
        report = evaluate_fitted(gate, without_gold)
    assert report["model_mismatch"]["judged_on"] == OTHER_LLM and report["judged_by"] == "agreement"
    unnamed = [dataclasses.replace(r, extra={}) for r in without_gold]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelMismatchWarning)
        assert "model_mismatch" not in evaluate_fitted(gate, unnamed)  # unknown model: nothing to compare


def test_calibrating_for_accuracy_on_agreement_labels_is_refused(without_gold):
    with pytest.raises(ValueError, match="would always retrieve"):
        fit_calibrated(quick_gate, without_gold, labels="agreement", objective=True)


def test_cross_fit_on_agreement_labels_keeps_each_folds_own_threshold(without_gold):
    # The best accuracy on agreement labels is always to retrieve: no fold is calibrated for it.
    factory = lambda: quick_gate(target="helps")  # noqa: E731
    crossed = cross_fit(factory, without_gold, folds=3, seed=1, labels="agreement")
    for index, (kept, _) in enumerate(fold_splits(len(without_gold), 3, 1)):
        own = fit_gate(factory, [without_gold[i] for i in kept], "contains", labels="agreement")
        assert crossed.thresholds[index] == own.threshold_ and own.calibration_ is None
    assert 0 < crossed.retrieve.mean() < 1
