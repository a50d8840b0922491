"""One ``GateLLMCallEvent`` per request a gate sends its LLM, whichever way the gate is
called (a selector, a router, the adaptive engine; blocking or awaited) and however many
``forwarding_llm_calls`` blocks surround the call.

The count is checked against the requests the chat model actually received: a real
``VerbalizedGate`` over the scripted core chat model (which keeps every conversation it
was sent), and once over the embedded SmolLM2, whose decision counts its own calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import pytest
from llama_index.core.indices import EmptyIndex
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.tools import QueryEngineTool
from llama_index.query_engine.adaptive_gates import AdaptiveQueryEngine
from llama_index.selectors.adaptive_gates import (
    GateDecisionEvent,
    GateLLMCallEvent,
    GateSelector,
    decision_of,
    forwarding_llm_calls,
)

from adaptive_gates import VerbalizedGate
from adaptive_gates.models import ChatReply

from .doubles import ScriptedChat
from .observers import EventRecorder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTION = "What is the capital of France?"
CHOICES = ["the LLM alone", "the documents"]


def _router(selector: GateSelector, index, llm) -> RouterQueryEngine:
    tools = [
        QueryEngineTool.from_defaults(EmptyIndex().as_query_engine(llm=llm), description=CHOICES[0]),
        QueryEngineTool.from_defaults(index.as_query_engine(llm=llm, similarity_top_k=1), description=CHOICES[1]),
    ]
    return RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=llm)


def _ways(gate: VerbalizedGate, index, llm) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every way a gate is asked through the package, each as a coroutine function."""
    selector = GateSelector(gate)
    router = _router(selector, index, llm)
    engine = AdaptiveQueryEngine.from_index(index, gate, llm=llm, similarity_top_k=1)

    async def blocking(call: Callable[[], object]) -> object:
        return call()

    return {
        "select": lambda: blocking(lambda: selector.select(CHOICES, QUESTION)),
        "aselect": lambda: selector.aselect(CHOICES, QUESTION),
        "router query": lambda: blocking(lambda: router.query(QUESTION)),
        "router aquery": lambda: router.aquery(QUESTION),
        "engine query": lambda: blocking(lambda: engine.query(QUESTION)),
        "engine aquery": lambda: engine.aquery(QUESTION),
    }


def _scopes(depth: int) -> contextlib.ExitStack:
    """``depth`` nested ``forwarding_llm_calls`` blocks (0: none)."""
    stack = contextlib.ExitStack()
    for _ in range(depth):
        stack.enter_context(forwarding_llm_calls())
    return stack


@pytest.mark.parametrize("depth", [0, 1, 2], ids=["no block", "in a block", "nested blocks"])
@pytest.mark.parametrize("way", ["select", "aselect", "router query", "router aquery", "engine query", "engine aquery"])
async def test_each_request_is_one_event_whichever_way_the_gate_is_asked(index, llm, recorder, way, depth):
    chat = ScriptedChat(ChatReply("Paris, certain."))  # a confident draft: the engine answers with it
    ask = _ways(VerbalizedGate(chat), index, llm)[way]
    with _scopes(depth):
        await ask()
    calls, (decided,) = recorder.of(GateLLMCallEvent), recorder.of(GateDecisionEvent)
    assert len(chat.calls) == 1 and len(calls) == 1, f"{len(calls)} events for {len(chat.calls)} request"
    assert calls[0].call["messages"] == chat.calls[0] and calls[0].call["reply"] == "Paris, certain."
    assert calls[0].span_id == decided.span_id, "the request's event left the deciding component's span"


async def test_the_users_dispatcher_gets_each_request_once_around_a_component(index, llm, recorder):
    mine = get_dispatcher("my_app.gates")
    own = EventRecorder()
    mine.add_event_handler(own)
    try:
        chat = ScriptedChat(ChatReply("Lyon (uncertain)"))
        ways = _ways(VerbalizedGate(chat), index, llm)
        with forwarding_llm_calls(on=mine):
            await ways["aselect"]()
            with forwarding_llm_calls():  # an inner block takes over for its requests
                await ways["engine aquery"]()
    finally:
        mine.event_handlers.remove(own)
    assert len(chat.calls) == 2
    assert len(own.of(GateLLMCallEvent)) == 1, "the user's dispatcher did not get the selector's request"
    assert len(recorder.of(GateLLMCallEvent)) == 2  # the root sees both, once each


def test_a_router_of_adaptive_engines_reports_each_gates_requests_once(index, llm, recorder):
    outer_chat, inner_chat = ScriptedChat(ChatReply("Lyon (uncertain)")), ScriptedChat(ChatReply("Paris, certain."))
    inner = AdaptiveQueryEngine.from_index(index, VerbalizedGate(inner_chat), llm=llm)
    tools = [
        QueryEngineTool.from_defaults(EmptyIndex().as_query_engine(llm=llm), description=CHOICES[0]),
        QueryEngineTool.from_defaults(inner, description="an adaptive engine"),
    ]
    router = RouterQueryEngine(selector=GateSelector(VerbalizedGate(outer_chat)), query_engine_tools=tools, llm=llm)
    with forwarding_llm_calls():
        response = router.query(QUESTION)
    assert response.response == "Paris"  # the outer gate chose the adaptive engine, whose gate drafted
    assert len(outer_chat.calls) == len(inner_chat.calls) == 1
    calls = recorder.of(GateLLMCallEvent)
    assert [c.call["reply"] for c in calls] == ["Lyon (uncertain)", "Paris, certain."]


async def test_the_embedded_models_requests_are_counted_once_in_a_block(llm, recorder):
    selector = GateSelector(VerbalizedGate(llm.backend, max_tokens=16))
    with forwarding_llm_calls():
        result = await selector.aselect(CHOICES, QUESTION)
    decision = decision_of(result)
    calls = recorder.of(GateLLMCallEvent)
    assert decision is not None  # SmolLM2-135M may state no certainty: a fallback counts its calls too
    assert len(calls) == decision.llm_calls >= 1
    assert all(c.call["model_id"] == llm.backend.model_id and c.call["reply"] is not None for c in calls)
