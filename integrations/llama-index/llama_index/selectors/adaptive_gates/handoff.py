"""The selector's decision, handed to the engine or retriever a router then asks.

A ``RouterQueryEngine`` (or ``RouterRetriever``) hands the selector's decision to no
choice: it only picks one. The decision is fired as a ``GateDecisionEvent`` from the
selector's span, though, and the router then asks the chosen choice in the same
context (same thread, same task). An event handler on the root dispatcher keeps the
last decision in a context variable, which the choice takes when it answers the same
question: concurrent queries, each in its own thread or task, never see one another's
decision. The direct route's ``DraftQueryEngine`` takes it to serve a draft, the
retrieve route's ``GatePassagesRetriever`` to return the passages the gate checked.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent

from adaptive_gates import GateDecision

from .events import GateDecisionEvent

#: The last gate decision fired in this context: (question, decision's dict).
_last_decision: ContextVar[tuple[str, dict[str, Any]] | None] = ContextVar("adaptive_gates_last_decision", default=None)


class _DecisionKeeper(BaseEventHandler):
    """Keeps each fired gate decision in the firing context."""

    @classmethod
    def class_name(cls) -> str:
        return "AdaptiveGatesDecisionKeeper"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, GateDecisionEvent):
            _last_decision.set((event.query, event.decision))


_keeper = _DecisionKeeper()


def keep_decisions() -> None:
    """Attach the keeper to the root dispatcher, once (a choice that takes decisions
    calls it when built)."""
    root = get_dispatcher()
    if not any(handler is _keeper for handler in root.event_handlers):
        root.add_event_handler(_keeper)


def take_decision(question: str) -> GateDecision | None:
    """The decision last fired in this context when it judged ``question``; taken, so a
    later query never reuses it."""
    kept = _last_decision.get()
    _last_decision.set(None)
    if kept is None or kept[0] != question:
        return None
    return GateDecision.from_dict(kept[1])


__all__ = ["keep_decisions", "take_decision"]
