import json

import numpy as np
import pytest

from adaptive_gates.calibration import threshold_for_objective, threshold_for_rate
from adaptive_gates.evaluation import evaluate_scores, gate_curve, oracle_curve, plot_reports, random_auc
from adaptive_gates.folds import fold_splits
from adaptive_gates.gates.fit_percentile import CV_FOLDS, cross_fit

# Four questions: retrieval helps q0, hurts q1, changes nothing for q2 (both right) and q3 (both wrong).
A = np.array([0, 1, 1, 0])
B = np.array([1, 0, 1, 0])


def test_curve_by_hand():
    curve = gate_curve(np.array([0.9, 0.1, 0.5, 0.3]), A, B)  # order q0, q2, q3, q1
    np.testing.assert_allclose(curve.rates, [0, 0.25, 0.5, 0.75, 1])
    np.testing.assert_allclose(curve.accuracy, [0.5, 0.75, 0.75, 0.75, 0.5])
    assert curve.auc == pytest.approx(0.25 * (0.625 + 0.75 + 0.75 + 0.625))


def test_ties_earn_the_expected_gain():
    # All scores equal: the gate knows nothing, so its curve is the random line.
    curve = gate_curve(np.zeros(4), A, B)
    np.testing.assert_allclose(curve.accuracy, np.linspace(0.5, 0.5, 5))
    assert curve.auc == pytest.approx(random_auc(A, B))


def test_oracle_orders_help_then_ties_then_hurt():
    oracle = oracle_curve(A, B)
    np.testing.assert_allclose(oracle.accuracy, [0.5, 0.75, 0.75, 0.75, 0.5])
    assert oracle.accuracy.max() == pytest.approx(np.maximum(A, B).mean())


def test_report_fields_and_values():
    scores = np.array([0.9, 0.1, 0.5, 0.3])
    report = evaluate_scores(scores, A, B, gate="g", metric="contains", retrieve=scores > 0.4, target_rate=0.5)
    for key in ["gate", "n", "metric", "never", "always", "oracle", "auc", "auc_random", "auc_oracle",
                "gap_capture", "decision_auroc", "curve", "at_threshold"]:
        assert key in report
    assert report["never"] == 0.5 and report["always"] == 0.5 and report["oracle"] == 0.75
    # The gate ranks the one helpful question first and the hurtful one last: it matches the oracle.
    assert report["gap_capture"] == pytest.approx(1.0)
    assert report["decision_auroc"] == pytest.approx(1.0)
    assert report["at_threshold"] == {"target_rate": 0.5, "retrieval_rate": 0.5, "accuracy": 0.75, "calls_saved": 0.5}
    json.dumps(report)  # JSON-ready


def test_reversed_gate_has_negative_gap_capture():
    report = evaluate_scores(-np.array([0.9, 0.1, 0.5, 0.3]), A, B, gate="g", metric="em")
    assert report["gap_capture"] < 0 and report["decision_auroc"] == pytest.approx(0.0)


def test_no_room_gives_none():
    same = np.array([1, 0, 1])
    report = evaluate_scores(np.array([0.1, 0.2, 0.3]), same, same, gate="g", metric="em")
    assert report["gap_capture"] is None and report["decision_auroc"] is None


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="finite"):
        gate_curve(np.array([np.nan, 0, 0, 0]), A, B)
    with pytest.raises(ValueError, match="scores"):
        gate_curve(np.zeros(3), A, B)


def test_threshold_for_rate_by_hand():
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.6])
    cal = threshold_for_rate(scores, 0.4)
    assert (scores > cal.threshold).sum() == 2 and cal.realised_rate == 0.4
    assert (scores > threshold_for_rate(scores, 0.0).threshold).sum() == 0
    assert (scores > threshold_for_rate(scores, 1.0).threshold).sum() == 5
    with pytest.raises(ValueError):
        threshold_for_rate(scores, 1.5)


def test_threshold_for_rate_with_ties_takes_nearest_reachable_rate():
    scores = np.array([0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    cal = threshold_for_rate(scores, 0.5)  # reachable: 0, .4, .8, 1
    assert cal.realised_rate == pytest.approx(0.4)
    assert (scores > cal.threshold).mean() == pytest.approx(0.4)


def test_threshold_for_objective_by_hand():
    scores = np.array([0.9, 0.1, 0.5, 0.3])
    cal = threshold_for_objective(scores, A, B)
    # Best accuracy 0.75 is first reached retrieving q0 alone: fewest retrievals win.
    assert cal.accuracy == pytest.approx(0.75) and cal.realised_rate == pytest.approx(0.25)
    assert (scores > cal.threshold).tolist() == [True, False, False, False]
    capped = threshold_for_objective(scores, A, B, max_rate=0.0)
    assert capped.realised_rate == 0.0 and capped.accuracy == pytest.approx(0.5)


def test_plot_writes_png(tmp_path):
    report = evaluate_scores(np.array([0.9, 0.1, 0.5, 0.3]), A, B, gate="g", metric="em", retrieve=np.array([1, 0, 1, 0]))
    path = plot_reports([report], tmp_path / "curve.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        plot_reports([], tmp_path / "x.png")


def test_fold_splits_partition_the_items_by_seed():
    splits = list(fold_splits(10, 3, seed=7))
    held = [set(h.tolist()) for _, h in splits]
    assert sorted(len(h) for h in held) == [3, 3, 4]
    assert set().union(*held) == set(range(10))
    for kept, held_out in splits:
        assert kept.tolist() == sorted(set(range(10)) - set(held_out.tolist()))
    again = [h.tolist() for _, h in fold_splits(10, 3, seed=7)]
    assert again == [h.tolist() for _, h in splits]
    assert again != [h.tolist() for _, h in fold_splits(10, 3, seed=8)]
    with pytest.raises(ValueError, match="folds"):
        list(fold_splits(3, 4, seed=0))


def test_gate_cross_fitting_holds_out_the_folds_evaluation_uses():
    seen = []

    def score_fold(kept, held_out):
        seen.append((kept.tolist(), held_out.tolist()))
        return np.zeros(len(held_out))

    cross_fit(30, 5, score_fold)
    assert seen == [(k.tolist(), h.tolist()) for k, h in fold_splits(30, min(CV_FOLDS, 30), 5)]
