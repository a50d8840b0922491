"""The gate's custom events under its runnable's name in ``astream_events`` filters.

LangChain filters a custom event by the event's own name, so
``router.astream_events(q, include_names=["gated_router"])`` would drop the decision
the router's gate dispatched. A runnable with this mixin adds ``DECISION_EVENT`` and
``LLM_CALL_EVENT`` to ``include_names`` when they name the runnable itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.schema import StreamEvent

from .llm_events import LLM_CALL_EVENT

#: Name of the custom event every decision is dispatched as (data: the decision as a dict).
DECISION_EVENT = "adaptive_gates_decision"
#: The custom events a gate dispatches.
GATE_EVENTS = (LLM_CALL_EVENT, DECISION_EVENT)


async def _astream_events(
    self: Any, input: Any, config: RunnableConfig | None = None, **kwargs: Any
) -> AsyncIterator[StreamEvent]:
    names = kwargs.get("include_names")
    if names is not None:
        kwargs["include_names"] = with_gate_events(names, self.get_name())
    async for event in super(GateEventsInNames, self).astream_events(input, config, **kwargs):
        yield event


class GateEventsInNames:
    """``astream_events`` that keeps the gate's events when ``include_names`` names this
    runnable; put before the runnable base class."""

    # Runnable's overloads, through **kwargs: typed as it is to the runnable's callers
    astream_events: ClassVar[Any] = _astream_events


def with_gate_events(names: Sequence[str], own_name: str) -> list[str]:
    """``names`` and, when they include ``own_name``, the gate's events."""
    extra = [event for event in GATE_EVENTS if own_name in names and event not in names]
    return [*names, *extra]
