"""The selector's decision, handed to the engine or retriever a router then asks.

A ``RouterQueryEngine`` (or ``RouterRetriever``) hands the selector's decision to no
choice: it only picks one. The decision is fired as a ``GateDecisionEvent`` from the
selector's span, though, and the router then asks the chosen choice in the same
context (same thread, same task). An event handler on the root dispatcher keeps the
last decision in a context variable, which the choice takes when it answers the same
question: concurrent queries, each in its own thread or task, never see one another's
decision. The direct route's ``DraftQueryEngine`` takes it to serve a draft, the
retrieve route's ``GatePassagesRetriever`` to return the passages the gate checked.

A retrieve choice that reads no passages (a plain retriever, an index's query engine)
retrieves a second time after a gate that retrieved to decide (a draft-check gate). The
selector watches for that (``RetrievalWatch``): when the passages of its decision are
not taken by a ``GatePassagesRetriever`` and a retriever is asked the same question in
the same context, it logs a warning, once, as LangChain's ``GatedRouter`` does when
built with such a route.
"""

from __future__ import annotations

import logging
import threading
from contextvars import ContextVar
from typing import Any, NamedTuple

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalStartEvent
from llama_index.core.schema import QueryBundle

from adaptive_gates import GateDecision

from .events import GateDecisionEvent

logger = logging.getLogger(__name__)

#: The last gate decision fired in this context: (question, decision's dict).
_last_decision: ContextVar[tuple[str, dict[str, Any]] | None] = ContextVar("adaptive_gates_last_decision", default=None)


class RetrievalWatch:
    """One selector's watch for a second retrieval: a decision whose gate retrieved to
    decide, followed by a retrieval of the same question in the same context that no
    ``GatePassagesRetriever`` stood in for. It warns once (``logging``), the first time."""

    def __init__(self) -> None:
        self._warned = False
        self._lock = threading.Lock()

    @property
    def warned(self) -> bool:
        """Whether it has warned."""
        return self._warned

    def expect(self, question: str | None, decision: GateDecision | None = None) -> None:
        """Watch ``question``, judged by ``decision``, in this context: when the decision
        retrieves and carries the passages its gate checked (``None``: stop watching)."""
        if question is None or decision is None or not decision.retrieve or decision.passages is None:
            _unread.set(None)
        else:
            _unread.set(_Unread(question, decision.gate, self))

    def retrieved_again(self, question: str, gate: str) -> None:
        """A retriever was asked ``question`` again: warn, the first time."""
        with self._lock:
            if self._warned:
                return
            self._warned = True
        logger.warning(
            "the gate %s retrieves to decide, and the router's retrieve choice retrieved %r again: that choice "
            "reads no GatePassagesRetriever, so each such query retrieves a second time. Retrieve in it through "
            "GatePassagesRetriever(retriever) to answer over the passages the gate checked",
            gate,
            question,
        )


class _Unread(NamedTuple):
    """A watched decision whose passages no ``GatePassagesRetriever`` has taken yet."""

    question: str
    gate: str
    watch: RetrievalWatch


#: The watched decision of this context, until its passages are read or retrieved again.
_unread: ContextVar[_Unread | None] = ContextVar("adaptive_gates_unread_passages", default=None)


def passages_read() -> None:
    """A ``GatePassagesRetriever`` is asked in this context: what it returns stands in
    for a second retrieval (it asks its own retriever only when there are no passages)."""
    _unread.set(None)


def _query_text(query: str | QueryBundle) -> str:
    return query.query_str if isinstance(query, QueryBundle) else str(query)


class _DecisionKeeper(BaseEventHandler):
    """Keeps each fired gate decision in the firing context, and tells a watch of a
    retrieval of its question."""

    @classmethod
    def class_name(cls) -> str:
        return "AdaptiveGatesDecisionKeeper"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, GateDecisionEvent):
            _last_decision.set((event.query, event.decision))
        elif isinstance(event, RetrievalStartEvent):
            unread = _unread.get()
            if unread is not None and _query_text(event.str_or_query_bundle) == unread.question:
                _unread.set(None)
                unread.watch.retrieved_again(unread.question, unread.gate)


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


__all__ = ["RetrievalWatch", "keep_decisions", "passages_read", "take_decision"]
