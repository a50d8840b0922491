"""``gate_route_event``: what a workflow step awaits to let a gate route a query."""

from __future__ import annotations

from llama_index.core.instrumentation import get_dispatcher
from llama_index.selectors.adaptive_gates.gating import adecide, route_of

from adaptive_gates import Gate
from adaptive_gates.extend import DRAFT, RETRIEVE

from .events import AnswerDirectlyEvent, DraftAnswerEvent, RetrieveEvent

dispatcher = get_dispatcher(__name__)


async def gate_route_event(
    gate: Gate, query: str, reuse_draft: bool = True
) -> RetrieveEvent | AnswerDirectlyEvent | DraftAnswerEvent:
    """The event ``gate``'s decision on ``query`` routes to: a ``RetrieveEvent``, a
    ``DraftAnswerEvent`` (no retrieval, and a drafted answer to reuse when
    ``reuse_draft``) or an ``AnswerDirectlyEvent``.

    Return it from a step (``-> RetrieveEvent | AnswerDirectlyEvent | DraftAnswerEvent``)
    and give each route a step of its own. The decision is also fired as an
    instrumentation ``GateDecisionEvent``. The gate's ``adecide`` runs in a worker
    thread or natively, so the workflow's loop is not blocked; a gate whose LLM fails,
    or that raises, routes by its fallback decision (retrieve by default) with
    ``error`` set; a gate that is not fitted raises ``NotFittedError`` (the core's
    door policy, ``adaptive_gates.extend.decide_or_fallback``).
    """
    if not isinstance(gate, Gate):
        raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    decision, payload = await adecide(gate, query, dispatcher)
    route = route_of(decision, reuse_draft)
    if route == RETRIEVE:
        return RetrieveEvent(query=query, decision=payload)
    if route == DRAFT:
        return DraftAnswerEvent(query=query, decision=payload)
    return AnswerDirectlyEvent(query=query, decision=payload)


__all__ = ["gate_route_event"]
