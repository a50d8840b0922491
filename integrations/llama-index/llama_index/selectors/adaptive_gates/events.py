"""LlamaIndex instrumentation events of the gates: each decision, and each request a
gate sends its LLM.

A component fires them from inside its own span (``dispatcher.span``), so an event
handler or span handler attached to the root dispatcher sees which query, selector or
engine decided what:

    from llama_index.core.instrumentation import get_dispatcher

    get_dispatcher().add_event_handler(handler)   # handler.handle(event)

Both events carry plain JSON-ready dicts, so exporters can ship them as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.dispatcher import Dispatcher
from llama_index.core.instrumentation.events import BaseEvent

from adaptive_gates import GateDecision
from adaptive_gates.listeners import DecisionListener, LLMCallEvent, listening

dispatcher = get_dispatcher(__name__)


class GateDecisionEvent(BaseEvent):
    """A gate decided whether to retrieve for ``query``.

    Attributes:
        query: the text the gate judged.
        decision: the core's ``GateDecision`` as a dict (``GateDecision.to_dict``).
    """

    query: str
    decision: dict[str, Any]

    @classmethod
    def class_name(cls) -> str:
        return "GateDecisionEvent"


class GateLLMCallEvent(BaseEvent):
    """A gate sent its LLM one request while deciding (the core's ``LLMCallEvent`` as a
    dict: gate, model_id, purpose, messages, reply, error, latency_ms)."""

    call: dict[str, Any]

    @classmethod
    def class_name(cls) -> str:
        return "GateLLMCallEvent"


def decision_event(query: str, decision: GateDecision, payload: dict[str, Any] | None = None) -> GateDecisionEvent:
    """The event for one decision (``payload``: its ``to_dict()`` when the caller
    already made it, as copying a decision's evidence is the costly part)."""
    return GateDecisionEvent(query=query, decision=decision.to_dict() if payload is None else payload)


def fire_decision(
    query: str, decision: GateDecision, on: Dispatcher | None = None, *, payload: dict[str, Any] | None = None
) -> None:
    """Fire the decision event from the caller's current span (``payload``: see
    ``decision_event``)."""
    (on or dispatcher).event(decision_event(query, decision, payload))


class _ForwardLLMCalls(DecisionListener):
    """Turns the core's LLM-call notifications into instrumentation events."""

    def __init__(self, on: Dispatcher) -> None:
        self.on = on

    def on_llm_call(self, event: LLMCallEvent) -> None:
        payload = dataclasses.asdict(event)
        payload["messages"] = [dict(m) for m in event.messages]
        self.on.event(GateLLMCallEvent(call=payload))


@contextmanager
def forwarding_llm_calls(on: Dispatcher | None = None) -> Iterator[None]:
    """Within the block, each request a gate sends its LLM is a ``GateLLMCallEvent``
    (the core's ``listening`` scope, so it follows the work into threads and tasks)."""
    with listening(_ForwardLLMCalls(on or dispatcher)):
        yield


__all__ = [
    "GateDecisionEvent",
    "GateLLMCallEvent",
    "decision_event",
    "dispatcher",
    "fire_decision",
    "forwarding_llm_calls",
]
