"""One gate decision per query, as the engines take it: never an exception, always
observable.

The gate's own failures (a bad question, a failing LLM) already come back as its
fallback decision with ``error`` set. A gate that raises anyway (an unfitted gate, a
bug in a custom gate) must not take the user's query down either: the engine then
retrieves, the safe choice, and records why in the decision.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from adaptive_gates import Gate, GateDecision
from llama_index.core.instrumentation.dispatcher import Dispatcher
from llama_index.selectors.adaptive_gates.events import fire_decision, forwarding_llm_calls

logger = logging.getLogger(__name__)

#: Key of a response's ``metadata`` holding the decision (``GateDecision.to_dict()``).
METADATA_KEY = "gate_decision"
#: Key of a response's ``metadata`` naming how it was answered: one of ``ROUTES``.
ROUTE_KEY = "gate_route"
#: ``"retrieve"``: synthesised over retrieved nodes; ``"direct"``: the LLM alone;
#: ``"draft"``: the gate's own draft answer, with no further LLM call.
ROUTES = ("retrieve", "direct", "draft")


def raised_decision(gate: Gate, question: str, exc: BaseException) -> GateDecision:
    """The decision taken when ``gate`` raised: retrieve, with the exception as ``error``."""
    error = f"the gate raised {type(exc).__name__}: {exc}"
    logger.warning("%s: %s; retrieving", gate.name, error)
    return GateDecision(
        retrieve=True, score=math.nan, threshold=math.nan, gate=gate.name, question=question, error=error
    )


def decide(gate: Gate, question: str, on: Dispatcher) -> GateDecision:
    """``gate``'s decision on ``question``, fired as a ``GateDecisionEvent`` on ``on``
    from the caller's span (after a ``GateLLMCallEvent`` per request the gate sent its
    LLM)."""
    with forwarding_llm_calls(on):
        try:
            decision = gate.decide(question)
        except Exception as exc:  # a gate must not take the query down
            decision = raised_decision(gate, question, exc)
    fire_decision(question, decision, on)
    return decision


async def adecide(gate: Gate, question: str, on: Dispatcher) -> GateDecision:
    """``decide`` awaited: the gate's ``adecide`` (worker thread or native async)."""
    with forwarding_llm_calls(on):
        try:
            decision = await gate.adecide(question)
        except Exception as exc:  # a gate must not take the query down
            decision = raised_decision(gate, question, exc)
    fire_decision(question, decision, on)
    return decision


def route_of(decision: GateDecision, reuse_draft: bool) -> str:
    """How to answer after ``decision`` (one of ``ROUTES``)."""
    if decision.retrieve:
        return "retrieve"
    if reuse_draft and decision.draft_answer and decision.draft_answer.strip():
        return "draft"
    return "direct"


def decision_metadata(decision: GateDecision, route: str) -> dict[str, Any]:
    """The entries a response's ``metadata`` gets: the decision and the route taken."""
    return {METADATA_KEY: decision.to_dict(), ROUTE_KEY: route}
