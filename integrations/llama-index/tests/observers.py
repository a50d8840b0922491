"""Real LlamaIndex instrumentation handlers that keep what they see, for the tests."""

from __future__ import annotations

from typing import Any

from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from pydantic import Field


class EventRecorder(BaseEventHandler):
    """An event handler keeping every event it sees."""

    events: list[BaseEvent] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "EventRecorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)

    def of(self, kind: type[BaseEvent]) -> list[Any]:
        """The events of one kind, in the order fired."""
        return [e for e in self.events if isinstance(e, kind)]


class SpanOwners(SimpleSpanHandler):
    """A span handler that also remembers which object each span was opened on."""

    owners: dict[str, object] = Field(default_factory=dict)

    def new_span(self, id_, bound_args, instance=None, parent_span_id=None, tags=None, **kwargs):
        self.owners[id_] = instance
        return super().new_span(id_, bound_args, instance, parent_span_id, tags, **kwargs)
