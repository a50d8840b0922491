"""What a router's route answers: the gate's own draft, and an answer with its decision.

The draft route answers with the draft a confident gate already gave, in the
branches' output type (an ``AIMessage`` where they give messages), so a router has
one output type. ``WithDecision`` puts the decision and the route name beside a
route's answer, as ``RunnablePassthrough.assign`` puts its keys beside the input:
a dict when invoked, ``AddableDict`` chunks when streamed (the decision first, then
the answer's chunks), which add up to the invoked dict.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.utils import AddableDict

from adaptive_gates import GateDecision

from .branch_types import is_message_type

#: Key of the route's answer in a router's output with ``include_decision``.
ANSWER_KEY = "answer"
#: Key of the decision (``GateDecision.to_dict()``) in that output.
DECISION_KEY = "gate_decision"
#: Key of the name of the route taken in that output.
ROUTE_KEY = "route"

#: The draft route's answer to a decision that carries a draft.
DraftAnswer = Callable[[GateDecision], Any]


def draft_text(decision: GateDecision) -> str:
    """The gate's draft answer as a string (for branches that give strings)."""
    return decision.draft_answer or ""


def draft_message(decision: GateDecision) -> AIMessage:
    """The gate's draft answer as an ``AIMessage`` (for branches that give messages)."""
    return AIMessage(content=draft_text(decision))


def draft_for(output_type: Any) -> DraftAnswer:
    """The draft answer in ``output_type``: a message for message outputs, else text."""
    return draft_message if is_message_type(output_type) else draft_text


def draft_route(draft: DraftAnswer, decision: GateDecision) -> Runnable:
    """A route answering ``draft(decision)`` whatever its input."""

    def answer(_: Any) -> Any:
        return draft(decision)

    async def aanswer(_: Any) -> Any:
        return draft(decision)

    return RunnableLambda(answer, afunc=aanswer, name="draft_answer")


def decision_output_fields(answer_type: Any) -> dict[str, Any]:
    """The fields of an answer with its decision, for the router's output schema."""
    return {ANSWER_KEY: (answer_type, ...), DECISION_KEY: (dict[str, Any], ...), ROUTE_KEY: (str, ...)}


class WithDecision(Runnable[Any, dict[str, Any]]):
    """``route``'s answer under ``ANSWER_KEY``, beside the decision (as a dict) and the
    route name.

    It hands its config straight to ``route``, as a ``RunnableBinding`` does, so it
    adds no run: the route's run stays the router's child.
    """

    def __init__(self, route: Runnable, decision: dict[str, Any], route_name: str) -> None:
        self.route = route
        self.name = route_name
        self._decided = {DECISION_KEY: decision, ROUTE_KEY: route_name}

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return {ANSWER_KEY: self.route.invoke(input, config, **kwargs), **self._decided}

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return {ANSWER_KEY: await self.route.ainvoke(input, config, **kwargs), **self._decided}

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[AddableDict]:
        yield AddableDict(self._decided)
        for chunk in self.route.stream(input, config, **kwargs):
            yield AddableDict({ANSWER_KEY: chunk})

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[AddableDict]:
        yield AddableDict(self._decided)
        async for chunk in self.route.astream(input, config, **kwargs):
            yield AddableDict({ANSWER_KEY: chunk})
