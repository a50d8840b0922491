"""A gate as a LlamaIndex selector, and the gates' instrumentation events."""

from adaptive_gates.extend import DIRECT, DRAFT, RETRIEVE, ROUTES

from .events import GateDecisionEvent, GateLLMCallEvent, fire_decision, forwarding_llm_calls
from .gating import response_feedback, route_of
from .passages import decision_nodes, hit_nodes
from .reason import decision_of
from .selector import DEFAULT_ROUTES, GateSelector

__all__ = [
    "DEFAULT_ROUTES",
    "DIRECT",
    "DRAFT",
    "RETRIEVE",
    "ROUTES",
    "GateDecisionEvent",
    "GateLLMCallEvent",
    "GateSelector",
    "decision_nodes",
    "decision_of",
    "fire_decision",
    "forwarding_llm_calls",
    "hit_nodes",
    "response_feedback",
    "route_of",
]
