"""The workflow events a gate routes a query to: one class per route, so each route is
its own step."""

from __future__ import annotations

from typing import Any

from llama_index.core.schema import NodeWithScore
from llama_index.core.workflow import Event

from adaptive_gates import GateDecision


class GateRouteEvent(Event):
    """A gate judged ``query``; the subclass says which way it sent it.

    Attributes:
        query: the question the gate judged.
        decision: the ``GateDecision`` as a dict (``GateDecision.to_dict``), JSON-ready
            for the event stream.
    """

    query: str
    decision: dict[str, Any]

    @property
    def gate_decision(self) -> GateDecision:
        """The decision as the core's ``GateDecision``."""
        return GateDecision.from_dict(self.decision)


class RetrieveEvent(GateRouteEvent):
    """The gate says the LLM needs retrieval for ``query``."""


class AnswerDirectlyEvent(GateRouteEvent):
    """The gate says the LLM can answer ``query`` alone."""


class DraftAnswerEvent(GateRouteEvent):
    """The gate says the LLM can answer ``query`` alone and already drafted the answer
    (``draft_answer``), so no further LLM call is needed."""

    @property
    def draft_answer(self) -> str:
        """The gate's draft answer."""
        return self.decision.get("draft_answer") or ""


class NodesRetrievedEvent(GateRouteEvent):
    """The nodes retrieved for ``query`` after the gate said retrieve."""

    nodes: list[NodeWithScore]


__all__ = ["AnswerDirectlyEvent", "DraftAnswerEvent", "GateRouteEvent", "NodesRetrievedEvent", "RetrieveEvent"]
