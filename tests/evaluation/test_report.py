"""The gate-quality report every gate is judged by."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from adaptive_gates.evaluation.report import decision_auroc, evaluate_scores, threshold_outcome
from adaptive_gates.gates import BM25DifficultyGate
from adaptive_gates.records.selfknowledge import outcome_scores


@pytest.fixture(scope="module")
def scored(outcome_records):
    train, test = outcome_records[:150], outcome_records[150:250]
    gate = BM25DifficultyGate().fit_outcomes(train)
    a, b = outcome_scores(test, "contains")
    return gate, gate.score_records(test), a, b


def test_the_report_of_a_real_gate(scored):
    gate, scores, a, b = scored
    report = evaluate_scores(scores, a, b, gate=gate.name, metric="contains")
    assert report["gate"] == "bm25-difficulty" and report["n"] == 100 and report["metric"] == "contains"
    assert report["never"] == pytest.approx(a.mean()) and report["always"] == pytest.approx(b.mean())
    assert report["oracle"] == pytest.approx(np.maximum(a, b).mean())
    assert report["auc_random"] == pytest.approx((a.mean() + b.mean()) / 2)
    assert report["auc_random"] - 1e-9 <= report["auc_oracle"]
    room = report["auc_oracle"] - report["auc_random"]
    assert report["gap_capture"] == pytest.approx((report["auc"] - report["auc_random"]) / room)
    assert len(report["curve"]) == len(report["oracle_curve"]) == 101
    assert report["at_threshold"] == {"target_rate": None}
    assert "in_accuracy" not in report
    json.dumps(report)


def test_decisions_add_the_threshold_outcome_and_units(scored):
    gate, scores, a, b = scored
    retrieve = gate.retrieves(scores)
    report = evaluate_scores(scores, a, b, gate=gate.name, metric="contains", retrieve=retrieve, target_rate=0.5)
    at = report["at_threshold"]
    assert at["target_rate"] == 0.5
    assert at["retrieval_rate"] == pytest.approx(retrieve.mean())
    assert at["accuracy"] == pytest.approx(np.where(retrieve, b, a).mean())
    assert at["calls_saved"] == pytest.approx(1 - retrieve.mean())
    assert report["in_accuracy"] == pytest.approx(at["accuracy"])
    assert report["retrieval_calls"] == pytest.approx(at["retrieval_rate"])
    assert report["random_band"]["retrieval_rate"] == pytest.approx(at["retrieval_rate"])
    first = evaluate_scores(scores, a, b, gate="g", metric="contains", retrieve=retrieve, retrieves_first=True)
    assert first["retrieval_calls"] == 1.0


def test_decision_auroc(scored):
    _, scores, a, b = scored
    assert decision_auroc(scores, a, b) == pytest.approx(roc_auc_score(b > a, scores))
    assert decision_auroc(b - a, a, b) == 1.0
    assert decision_auroc(np.arange(3.0), np.zeros(3), np.ones(3)) is None  # retrieval always helps
    assert decision_auroc(np.arange(3.0), np.ones(3), np.ones(3)) is None


def test_threshold_outcome():
    out = threshold_outcome(np.array([1, 0, 0, 1]), np.array([1.0, 1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0, 1.0]))
    assert out == {"retrieval_rate": 0.5, "accuracy": 0.5, "calls_saved": 0.5}


def test_bad_scores_are_refused(scored):
    _, scores, a, b = scored
    with pytest.raises(ValueError, match="got 99 scores for 100 outcomes"):
        evaluate_scores(scores[:-1], a, b, gate="g", metric="contains")
