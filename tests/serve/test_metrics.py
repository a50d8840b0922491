"""The server's Prometheus metrics."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adaptive_gates.gates import BM25DifficultyGate
from adaptive_gates.records.decision import GateDecision
from adaptive_gates.serve.metrics import ServeMetrics
from adaptive_gates.serve.records import ServedDecision


@pytest.fixture(scope="module")
def bm25_decisions(qa_records):
    """A real gate's decisions: one that retrieves, one that answers directly, one fallback."""
    questions = [r.question for r in qa_records[:60]]
    gate = BM25DifficultyGate().fit(questions)
    retrieved, direct, fallback = gate.decide_batch(["Zxqv blorptang quizzical flumph?", questions[0], "  "])
    assert retrieved.retrieve and not direct.retrieve and fallback.is_fallback
    return retrieved, direct, fallback


def samples(metrics):
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }


def test_every_route_and_error_kind_shows_at_zero():
    seen = samples(ServeMetrics())
    for route in ("direct", "retrieve", "draft"):
        assert seen[("adaptive_gates_decisions_total", (("route", route),))] == 0
    for kind in ("error", "timeout"):
        assert seen[("adaptive_gates_upstream_errors_total", (("kind", kind),))] == 0


def test_answered_requests_are_counted(bm25_decisions):
    metrics = ServeMetrics()
    retrieved, direct, fallback = bm25_decisions
    metrics.answered(ServedDecision.new(retrieved, []), rate=1.0, seconds=0.2, stream=False)
    metrics.answered(ServedDecision.new(direct, []), rate=0.5, seconds=1.5, stream=True)
    metrics.answered(ServedDecision.new(fallback, []), rate=None, seconds=0.1, stream=False)
    metrics.feedback.labels("true").inc()
    seen = samples(metrics)
    assert seen[("adaptive_gates_decisions_total", (("route", "retrieve"),))] == 2
    assert seen[("adaptive_gates_decisions_total", (("route", "direct"),))] == 1
    assert seen[("adaptive_gates_retrieval_rate", ())] == 0.5  # None leaves the last rate
    assert seen[("adaptive_gates_fallbacks_total", ())] == 1
    assert seen[("adaptive_gates_gate_latency_seconds_count", ())] == 3
    assert seen[("adaptive_gates_request_latency_seconds_count", (("stream", "true"),))] == 1
    assert math.isclose(seen[("adaptive_gates_request_latency_seconds_sum", (("stream", "false"),))], 0.3)
    assert seen[("adaptive_gates_feedback_total", (("correct", "true"),))] == 1


def test_two_servers_count_apart(bm25_decisions):
    one, two = ServeMetrics(), ServeMetrics()
    one.answered(ServedDecision.new(bm25_decisions[0], []), rate=1.0, seconds=0.1, stream=False)
    assert samples(two)[("adaptive_gates_decisions_total", (("route", "retrieve"),))] == 0


def test_decision_routes(bm25_decisions):
    retrieved, direct, fallback = bm25_decisions
    assert isinstance(retrieved, GateDecision)
    assert (retrieved.route, direct.route, fallback.route) == ("retrieve", "direct", "retrieve")
