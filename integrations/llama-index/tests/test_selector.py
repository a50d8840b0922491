"""The gate selector inside LlamaIndex's own routers, over a real index and the
embedded models: which engine answers, the decision in the response, its events."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import pytest
from llama_index.core import Settings
from llama_index.core.base.base_selector import SelectorResult, SingleSelection
from llama_index.core.indices import EmptyIndex
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.retrievers import RouterRetriever
from llama_index.core.tools import QueryEngineTool, RetrieverTool, ToolMetadata
from llama_index.selectors.adaptive_gates import (
    GateDecisionEvent,
    GateLLMCallEvent,
    GateSelector,
    decision_of,
    route_of,
)

from adaptive_gates import BackendError, GateDecision, NotFittedError, PopularityGate, SKRKnnGate, VerbalizedGate
from adaptive_gates.models import ChatReply

from .buggy_gates import buggy_gate
from .doubles import ScriptedChat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Close to a KNOWN memory question (direct) and to an UNKNOWN one (retrieve).
KNOWN_Q = "Who was the author of Hamlet?"
UNKNOWN_Q = "What was the population of Tuvalu at the last census?"


@pytest.fixture
def observed(recorder, spans):
    """A real event handler and span handler on the root dispatcher."""
    return recorder, spans


def direct_engine(llm):
    return QueryEngineTool.from_defaults(
        EmptyIndex().as_query_engine(llm=llm), name="llm", description="Answers from the LLM alone."
    )


def retrieval_engine(index, llm):
    return QueryEngineTool.from_defaults(
        index.as_query_engine(llm=llm, similarity_top_k=1),  # one paragraph to read: the prompt's cost
        name="wiki",
        description="Answers from Wikipedia paragraphs.",
    )


def router(gate, index, llm, **selector_options) -> RouterQueryEngine:
    """The default two choices: 0 direct, 1 retrieval."""
    tools = [direct_engine(llm), retrieval_engine(index, llm)]
    return RouterQueryEngine(selector=GateSelector(gate, **selector_options), query_engine_tools=tools, llm=llm)


def assert_answered(response, *, retrieved: bool) -> None:
    """The chosen engine answered (in a few tokens: the tests follow the route, not the words)."""
    assert str(response).strip(), "the chosen engine gave no answer"
    assert bool(response.source_nodes) == retrieved


def test_the_router_answers_known_questions_directly_and_retrieves_for_unknown_ones(knn_gate, index, brief_llm):
    engine = router(knn_gate, index, brief_llm)

    known = engine.query(KNOWN_Q)
    assert known.metadata["selector_result"].ind == 0
    assert_answered(known, retrieved=False)
    decision = decision_of(known)
    expected = knn_gate.decide(KNOWN_Q)
    assert not decision.retrieve and decision.gate == "skr-knn" and decision.question == KNOWN_Q
    assert decision.score == expected.score and decision.details == expected.details

    unknown = engine.query(UNKNOWN_Q)
    assert unknown.metadata["selector_result"].ind == 1
    assert_answered(unknown, retrieved=True)
    assert decision_of(unknown.metadata).retrieve
    assert unknown.metadata["selector_result"].reason.startswith("retrieve: skr-knn scored")


async def test_async_queries_route_the_same_way(knn_gate, index, brief_llm):
    engine = router(knn_gate, index, brief_llm)
    known, unknown = await engine.aquery(KNOWN_Q), await engine.aquery(UNKNOWN_Q)
    assert [known.metadata["selector_result"].ind, unknown.metadata["selector_result"].ind] == [0, 1]
    assert_answered(known, retrieved=False)
    assert_answered(unknown, retrieved=True)
    same_time = {"latency_ms": 0.0}
    assert replace(decision_of(unknown), **same_time) == replace(knn_gate.decide(UNKNOWN_Q), **same_time)


def test_the_router_retriever_returns_nodes_only_when_the_gate_retrieves(knn_gate, index, observed):
    events, _ = observed
    retriever = RouterRetriever(
        selector=GateSelector(knn_gate),
        retriever_tools=[
            RetrieverTool.from_defaults(EmptyIndex().as_retriever(), description="No documents."),
            RetrieverTool.from_defaults(index.as_retriever(similarity_top_k=2), description="Wikipedia paragraphs."),
        ],
    )
    assert retriever.retrieve(KNOWN_Q) == []
    assert len(retriever.retrieve(UNKNOWN_Q)) == 2
    assert len(asyncio.run(retriever.aretrieve(UNKNOWN_Q))) == 2
    decisions = events.of(GateDecisionEvent)
    assert [(e.query, e.decision["retrieve"]) for e in decisions] == [
        (KNOWN_Q, False),
        (UNKNOWN_Q, True),
        (UNKNOWN_Q, True),
    ]


def test_each_decision_is_an_event_inside_the_selectors_span(knn_gate, index, brief_llm, observed):
    events, spans = observed
    selector = GateSelector(knn_gate)
    engine = RouterQueryEngine(
        selector=selector,
        query_engine_tools=[direct_engine(brief_llm), retrieval_engine(index, brief_llm)],
        llm=brief_llm,
    )
    response = engine.query(UNKNOWN_Q)
    (event,) = events.of(GateDecisionEvent)
    assert event.query == UNKNOWN_Q and event.decision == decision_of(response).to_dict()
    assert spans.owners[event.span_id] is selector, "the decision was fired outside the selector's span"
    assert event.span_id.startswith("GateSelector._select-")


def test_a_verbalized_gate_on_the_embedded_llm_routes_with_its_llm_calls_observed(index, brief_llm, observed):
    events, spans = observed
    selector = GateSelector(VerbalizedGate(brief_llm.backend, max_tokens=6))
    engine = RouterQueryEngine(
        selector=selector,
        query_engine_tools=[direct_engine(brief_llm), retrieval_engine(index, brief_llm)],
        llm=brief_llm,
    )
    response = asyncio.run(engine.aquery("What is the capital of France?"))
    decision = decision_of(response)
    assert decision.gate == "verbalized" and decision.details, "the gate's evidence is missing"
    expected_choice = 1 if decision.retrieve else 0
    assert response.metadata["selector_result"].ind == expected_choice
    assert_answered(response, retrieved=decision.retrieve)
    calls = events.of(GateLLMCallEvent)
    assert calls and calls[0].call["purpose"] == "answer+certainty" and calls[0].call["reply"]
    assert calls[0].call["messages"][-1]["content"].count("What is the capital of France?") == 1
    (made,) = events.of(GateDecisionEvent)
    assert {c.span_id for c in calls} == {made.span_id}
    assert spans.owners[made.span_id] is selector


async def test_deciding_asynchronously_leaves_the_event_loop_free(brief_llm, loop_ticks):
    gate = VerbalizedGate(brief_llm.backend, max_tokens=6)
    async with loop_ticks:
        result = await GateSelector(gate).aselect(["direct", "retrieve"], "Who painted the Mona Lisa?")
    assert decision_of(result).gate == "verbalized"
    assert loop_ticks.count > 0, "the event loop was blocked while the gate decided"


def test_more_than_two_choices_follow_the_routes_by_name(knn_gate, index, brief_llm):
    summary = QueryEngineTool.from_defaults(
        EmptyIndex().as_query_engine(llm=brief_llm), name="summary", description="Summaries (never chosen by the gate)."
    )
    tools = [summary, retrieval_engine(index, brief_llm), direct_engine(brief_llm)]
    selector = GateSelector(knn_gate, routes={"retrieve": "wiki", "direct": "Answers from the LLM alone."})
    engine = RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=brief_llm)
    assert engine.query(KNOWN_Q).metadata["selector_result"].ind == 2  # by description
    assert engine.query(UNKNOWN_Q).metadata["selector_result"].ind == 1  # by name
    direct = "Answers from the LLM alone."
    assert selector.routes == {"retrieve": "wiki", "direct": direct, "draft": direct}


def test_a_drafted_answer_takes_the_draft_route(index, brief_llm):
    gate = VerbalizedGate(ScriptedChat(ChatReply("Paris, certain.")))
    choices = ["direct", "retrieve", "reuse the draft"]
    selector = GateSelector(gate, routes={"direct": 0, "retrieve": 1, "draft": 2})
    selection = selector.select(choices, "Capital of France?")
    assert selection.ind == 2 and selection.reason.startswith("draft: verbalized scored 0 <= threshold 0.5")
    assert decision_of(selection).draft_answer == "Paris" and route_of(decision_of(selection)) == "draft"
    # without a draft route, a draft goes where direct answers go
    assert GateSelector(gate).select(choices[:2], "Capital of France?").ind == 0


@pytest.mark.parametrize("draft, route", [(None, "direct"), ("", "direct"), ("  ", "direct"), ("Paris", "draft")])
def test_only_a_usable_draft_takes_the_draft_route(draft, route):
    """The decision's own route, as the other doors read it: a blank draft is answered
    directly, and so is any draft when drafts are not reused."""
    decision = GateDecision(False, 0.1, 0.5, "g", question="q", draft_answer=draft)
    assert route_of(decision) == decision.route == route
    assert route_of(decision, reuse_draft=False) == "direct"


def test_a_failing_llm_ends_in_the_recorded_fallback_and_the_query_still_answers(index, brief_llm, observed):
    events, _ = observed
    gate = VerbalizedGate(ScriptedChat(BackendError("model server returned 503")))
    response = router(gate, index, brief_llm).query(UNKNOWN_Q)
    assert_answered(response, retrieved=True)
    decision = decision_of(response)
    assert decision.is_fallback and decision.retrieve and math.isnan(decision.score)
    assert "503" in decision.error
    assert "fell back to retrieval" in response.metadata["selector_result"].reason
    (call,) = events.of(GateLLMCallEvent)
    assert call.call["reply"] is None and "503" in call.call["error"]
    assert events.of(GateDecisionEvent)[0].decision["error"] == decision.error


async def test_a_gate_that_raises_is_treated_as_its_fallback(core_embedder, index, brief_llm):
    response = await router(buggy_gate(core_embedder), index, brief_llm).aquery(KNOWN_Q)
    assert_answered(response, retrieved=True)
    decision = decision_of(response)
    assert decision.retrieve and decision.question == KNOWN_Q
    assert decision.error.startswith("the gate raised AttributeError") and "tie_threshold" in decision.error
    stays_direct = buggy_gate(core_embedder, fallback_retrieve=False)
    assert GateSelector(stays_direct).select(["direct", "retrieve"], UNKNOWN_Q).ind == 0


def test_a_gate_that_raises_gives_one_fallback_blocking_or_awaited(core_embedder, observed):
    events, _ = observed
    selector = GateSelector(buggy_gate(core_embedder))
    blocking = selector.select(["direct", "retrieve"], KNOWN_Q)
    awaited = asyncio.run(selector.aselect(["direct", "retrieve"], KNOWN_Q))
    assert blocking.ind == awaited.ind == 1
    decisions = [decision_of(blocking), decision_of(awaited)]
    assert [(d.retrieve, d.error, d.question) for d in decisions] == [
        (True, decisions[0].error, KNOWN_Q)
    ] * 2 and "AttributeError" in decisions[0].error
    assert [e.decision["error"] for e in events.of(GateDecisionEvent)] == [decisions[0].error] * 2


async def test_an_unfitted_gate_raises_not_fitted_as_in_every_door(core_embedder, index, brief_llm, observed):
    events, _ = observed
    engine = router(SKRKnnGate(core_embedder, k=1), index, brief_llm)
    with pytest.raises(NotFittedError, match="SKRKnnGate is not fitted"):
        engine.query(UNKNOWN_Q)
    with pytest.raises(NotFittedError, match="SKRKnnGate is not fitted"):
        await engine.aquery(UNKNOWN_Q)
    assert events.of(GateDecisionEvent) == []


def test_misconfigured_routes_are_refused_with_what_is_wrong(knn_gate):
    with pytest.raises(ValueError, match="unknown routes"):
        GateSelector(knn_gate, routes={"retrieve": 1, "direct": 0, "rag": 2})
    with pytest.raises(ValueError, match="must map \\['retrieve'\\]"):
        GateSelector(knn_gate, routes={"direct": 0})
    with pytest.raises(ValueError, match="index"):
        GateSelector(knn_gate, routes={"direct": 0, "retrieve": -1})
    with pytest.raises(TypeError, match="Gate"):
        GateSelector("skr-knn")
    three = ["a", "b", "c"]
    with pytest.raises(ValueError, match="3 choices; without routes"):
        GateSelector(knn_gate).select(three, KNOWN_Q)
    with pytest.raises(ValueError, match="'wiki', which names no choice"):
        GateSelector(knn_gate, routes={"direct": 0, "retrieve": "wiki"}).select(three, KNOWN_Q)
    with pytest.raises(ValueError, match="only 3 choices"):
        GateSelector(knn_gate, routes={"direct": 0, "retrieve": 3}).select(three, KNOWN_Q)
    tools = [ToolMetadata(description="x", name="same"), ToolMetadata(description="y", name="same")]
    with pytest.raises(ValueError, match="name of choices \\[0, 1\\]"):
        GateSelector(knn_gate, routes={"direct": 0, "retrieve": "same"}).select(tools, KNOWN_Q)


def test_the_decision_reads_back_from_any_form_of_the_selection(knn_gate):
    # a question that is no UTF-8 text (a lone surrogate): the gate's fallback
    result = GateSelector(knn_gate).select(["direct", "retrieve"], "Who wrote \ud800?")
    decision = decision_of(result)
    assert decision.is_fallback and math.isnan(decision.score) and "invalid question" in decision.error
    for form in (result, result.selections[0], result.reason, {"selector_result": result}):
        assert decision_of(form).error == decision.error
    foreign = SelectorResult(selections=[SingleSelection(index=0, reason="the LLM picked it")])
    assert decision_of(foreign) is None and decision_of({}) is None
    with pytest.raises(ValueError, match="not a GateDecision"):
        decision_of('retrieve: x\ngate decision: {"retrieve": true}')


def test_the_selector_has_no_prompts(knn_gate, index, brief_llm):
    selector = GateSelector(knn_gate)
    assert selector.get_prompts() == {}
    prompts = router(knn_gate, index, brief_llm).get_prompts()
    assert not any(key.startswith("selector:") for key in prompts)


def test_from_defaults_routes_by_the_popularity_gate_with_no_llm_asked(knn_gate, index, brief_llm, recorder):
    selector = GateSelector.from_defaults()
    assert isinstance(selector.gate, PopularityGate) and selector.routes == {"direct": 0, "retrieve": 1, "draft": 0}
    engine = RouterQueryEngine(
        selector=selector,
        query_engine_tools=[direct_engine(brief_llm), retrieval_engine(index, brief_llm)],
        llm=brief_llm,
    )
    known, rare = engine.query("Who wrote Hamlet?"), engine.query(UNKNOWN_Q)
    assert [known.metadata["selector_result"].ind, rare.metadata["selector_result"].ind] == [0, 1]
    assert decision_of(known).gate == decision_of(rare).gate == "popularity"
    assert_answered(rare, retrieved=True)
    assert recorder.of(GateLLMCallEvent) == []  # the selector asked no LLM
    chosen = GateSelector.from_defaults(knn_gate, routes={"direct": 1, "retrieve": 0})
    assert chosen.gate is knn_gate and chosen.select(["retrieve", "direct"], UNKNOWN_Q).ind == 0


def test_the_router_still_needs_an_llm_for_its_summarizer(index, brief_llm, monkeypatch):
    monkeypatch.setattr(Settings, "_llm", None)  # no global LLM: LlamaIndex falls back to OpenAI
    tools = [direct_engine(brief_llm), retrieval_engine(index, brief_llm)]
    with pytest.raises(ValueError, match="OpenAI"):
        RouterQueryEngine(selector=GateSelector.from_defaults(), query_engine_tools=tools)
    engine = RouterQueryEngine(selector=GateSelector.from_defaults(), query_engine_tools=tools, llm=brief_llm)
    assert engine.query("Who wrote Hamlet?").metadata["selector_result"].ind == 0
