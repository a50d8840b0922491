"""A gate as a step of a LlamaIndex ``Workflow``: the events it routes to, the function
a step calls to decide, and an adaptive-RAG workflow built from them."""

from .events import AnswerDirectlyEvent, DraftAnswerEvent, GateRouteEvent, NodesRetrievedEvent, RetrieveEvent
from .routing import gate_route_event
from .workflow import AdaptiveRAGWorkflow

__all__ = [
    "AdaptiveRAGWorkflow",
    "AnswerDirectlyEvent",
    "DraftAnswerEvent",
    "GateRouteEvent",
    "NodesRetrievedEvent",
    "RetrieveEvent",
    "gate_route_event",
]
