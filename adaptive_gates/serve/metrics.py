"""The server's Prometheus metrics (``GET /metrics``), in a registry of its own so two
apps in one process (tests, a benchmark) count apart."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .records import ServedDecision

#: Latency buckets (seconds) from a sub-millisecond gate to a slow LLM answer.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ServeMetrics:
    """Decisions by route, the retrieval rate, gate and request latency, fallbacks,
    upstream errors and feedback."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "adaptive_gates_decisions", "Answered requests by the route the gate chose", ["route"], registry=r
        )
        self.retrieval_rate = Gauge(
            "adaptive_gates_retrieval_rate", "Share of answered requests that retrieved", registry=r
        )
        self.gate_latency = Histogram(
            "adaptive_gates_gate_latency_seconds", "Time the gate took to decide", buckets=_BUCKETS, registry=r
        )
        self.request_latency = Histogram(
            "adaptive_gates_request_latency_seconds",
            "Time from request to the answer's end",
            ["stream"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.fallbacks = Counter(
            "adaptive_gates_fallbacks", "Decisions the gate fell back to (its backend or the input failed)", registry=r
        )
        self.upstream_errors = Counter(
            "adaptive_gates_upstream_errors", "Upstream LLM calls that failed, by kind", ["kind"], registry=r
        )
        self.feedback = Counter("adaptive_gates_feedback", "Feedback received, by verdict", ["correct"], registry=r)
        for route in ("direct", "retrieve", "draft"):
            self.decisions.labels(route)  # every route shows, at 0 until taken
        for kind in ("error", "timeout"):
            self.upstream_errors.labels(kind)

    def answered(self, served: ServedDecision, rate: float | None, seconds: float, stream: bool) -> None:
        """Count one answered request."""
        self.decisions.labels(served.route).inc()
        if rate is not None:
            self.retrieval_rate.set(rate)
        self.gate_latency.observe(served.decision.latency_ms / 1000)
        self.request_latency.labels("true" if stream else "false").observe(seconds)
        if served.decision.is_fallback:
            self.fallbacks.inc()

    def render(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)
