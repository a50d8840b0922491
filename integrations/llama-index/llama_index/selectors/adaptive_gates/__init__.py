"""A gate as a LlamaIndex selector, and the gates' instrumentation events."""

from .events import GateDecisionEvent, GateLLMCallEvent, fire_decision, forwarding_llm_calls

__all__ = ["GateDecisionEvent", "GateLLMCallEvent", "fire_decision", "forwarding_llm_calls"]
