"""LlamaIndex instrumentation events of the gates: each decision, and each request a
gate sends its LLM.

A component fires them from inside its own span (``dispatcher.span``), so an event
handler or span handler attached to the root dispatcher sees which query, selector or
engine decided what:

    from llama_index.core.instrumentation import get_dispatcher

    get_dispatcher().add_event_handler(handler)   # handler.handle(event)

Both events carry plain JSON-ready dicts, so exporters can ship them as they are.

Each request is one ``GateLLMCallEvent`` however many forwarding scopes surround it: the
innermost ``forwarding_llm_calls`` block fires it, and the selector's and engines' own
scopes (``forwarding_unless_scoped``) step aside for a block the user opened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.dispatcher import Dispatcher
from llama_index.core.instrumentation.events import BaseEvent

from adaptive_gates import GateDecision
from adaptive_gates.extend import DecisionListener, LLMCallEvent, listening

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
        if _forwarder.get() is not self:
            return  # an inner scope forwards this request: one event per request
        payload = dataclasses.asdict(event)
        payload["messages"] = [dict(m) for m in event.messages]
        self.on.event(GateLLMCallEvent(call=payload))


#: The scope that forwards the requests made here (the innermost one); the core sends
#: each request to every enclosing scope's listener, and only this one fires.
_forwarder: ContextVar[_ForwardLLMCalls | None] = ContextVar("gate_llm_call_forwarder", default=None)


@contextmanager
def forwarding_llm_calls(on: Dispatcher | None = None) -> Iterator[None]:
    """Within the block, each request a gate sends its LLM is one ``GateLLMCallEvent``
    on ``on`` (default: this module's dispatcher, which propagates to the root).

    The core's ``listening`` scope carries it into the threads and tasks the work
    starts. Blocks nest: the innermost one fires each request's event, once.
    """
    forwarder = _ForwardLLMCalls(on or dispatcher)
    token = _forwarder.set(forwarder)
    try:
        with listening(forwarder):
            yield
    finally:
        _forwarder.reset(token)


@contextmanager
def forwarding_unless_scoped(on: Dispatcher) -> Iterator[None]:
    """``forwarding_llm_calls(on)`` unless a block around the caller already forwards:
    a component forwards its gate's requests by default, to the dispatcher the user
    chose when the user opened a block."""
    if _forwarder.get() is not None:
        yield
        return
    with forwarding_llm_calls(on):
        yield


__all__ = [
    "GateDecisionEvent",
    "GateLLMCallEvent",
    "decision_event",
    "dispatcher",
    "fire_decision",
    "forwarding_llm_calls",
    "forwarding_unless_scoped",
]
