import json

import numpy as np
import pytest

from adaptive_gates.calibration import threshold_for_objective, threshold_for_rate
from adaptive_gates.evaluation import evaluate_scores, gate_curve, oracle_curve, plot_reports, random_auc

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
