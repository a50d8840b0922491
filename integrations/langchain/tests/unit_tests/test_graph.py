"""The gate as a node and a conditional edge of a real compiled LangGraph graph."""

import asyncio
import operator
from dataclasses import dataclass
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from adaptive_gates import VerbalizedGate
from langchain_adaptive_gates import DECISION_EVENT, LangChainChatModel, gate_node, route_on_decision

from .chat_doubles import scripted

KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"


class State(TypedDict, total=False):
    question: str
    gate_decision: dict
    path: Annotated[list[str], operator.add]


def _graph(gate):
    graph = StateGraph(State)
    graph.add_node("gate", gate_node(gate))
    graph.add_node("retrieve", lambda s: {"path": ["retrieve"]})
    graph.add_node("direct", lambda s: {"path": ["direct"]})
    graph.add_edge(START, "gate")
    graph.add_conditional_edges("gate", route_on_decision(), ["retrieve", "direct"])
    graph.add_edge("retrieve", END)
    graph.add_edge("direct", END)
    return graph.compile()


def test_graph_routes_on_the_decision(knn_gate):
    app = _graph(knn_gate)
    known = app.invoke({"question": KNOWN_Q, "path": []})
    assert known["path"] == ["direct"] and known["gate_decision"]["retrieve"] is False
    unknown = asyncio.run(app.ainvoke({"question": UNKNOWN_Q, "path": []}))
    assert unknown["path"] == ["retrieve"] and unknown["gate_decision"]["question"] == UNKNOWN_Q


def test_graph_passes_per_request_control(knn_gate):
    app = _graph(knn_gate)
    forced = app.invoke({"question": KNOWN_Q, "path": []}, {"configurable": {"gate_retrieval": "always"}})
    assert forced["path"] == ["retrieve"] and forced["gate_decision"]["details"] == {"forced": "always"}


def test_the_edge_without_a_decision_names_the_gate_node():
    graph = StateGraph(State)
    graph.add_node("retrieve", lambda s: {"path": ["retrieve"]})
    graph.add_node("direct", lambda s: {"path": ["direct"]})
    graph.add_conditional_edges(START, route_on_decision(), ["retrieve", "direct"])
    graph.add_edge("retrieve", END)
    graph.add_edge("direct", END)
    with pytest.raises(KeyError, match=r"no 'gate_decision': run the gate node \(gate_node\) before this edge"):
        graph.compile().invoke({"question": KNOWN_Q, "path": []})


def test_a_draft_route_takes_the_gates_own_answer():
    gate = VerbalizedGate(LangChainChatModel(scripted("Paris. certain")), judge=False, top_logprobs=0)
    route = route_on_decision(draft="draft")
    decided = gate_node(gate).invoke({"question": "What is the capital of France?"})
    assert decided["gate_decision"]["draft_answer"] == "Paris" and route(decided) == "draft"
    assert route_on_decision()(decided) == "direct"  # without a draft node, the direct one
    blank = {**decided, "gate_decision": {**decided["gate_decision"], "draft_answer": " "}}
    assert route(blank) == "direct"  # a blank draft is no answer, as at every door


def test_a_state_without_the_question_gets_the_recorded_fallback(knn_gate):
    app = _graph(knn_gate)
    for state in (app.invoke({"path": []}), asyncio.run(app.ainvoke({"path": []}))):
        decision = state["gate_decision"]
        assert state["path"] == ["retrieve"] and decision["retrieve"] is True
        assert "no 'question' or 'input' key" in decision["error"] and "path" in decision["error"]


def test_the_gate_node_reads_the_key_it_is_given(knn_gate):
    node = gate_node(knn_gate, input_key="query")
    assert node.invoke({"query": KNOWN_Q})["gate_decision"]["question"] == KNOWN_Q
    assert asyncio.run(node.ainvoke({"query": UNKNOWN_Q}))["gate_decision"]["retrieve"] is True


class InputState(State, total=False):
    input: str


def test_the_gate_node_reads_input_where_the_state_has_no_question(knn_gate):
    graph = StateGraph(InputState)
    graph.add_node("gate", gate_node(knn_gate))
    graph.add_edge(START, "gate")
    graph.add_edge("gate", END)
    decision = graph.compile().invoke({"input": UNKNOWN_Q})["gate_decision"]
    assert decision["question"] == UNKNOWN_Q and decision["retrieve"] is True and decision["error"] is None


@dataclass
class AppContext:
    """A graph's own context schema: a field of its own beside the gate's keys."""

    user: str = "anyone"
    gate_retrieval: str | None = None


def test_the_run_context_controls_the_gate_and_wins_over_configurable(knn_gate):
    graph = StateGraph(State, context_schema=AppContext)
    graph.add_node("gate", gate_node(knn_gate))
    graph.add_edge(START, "gate")
    graph.add_edge("gate", END)
    app = graph.compile()
    forced = app.invoke({"question": KNOWN_Q}, context=AppContext(gate_retrieval="always"))["gate_decision"]
    assert forced["retrieve"] is True and forced["details"] == {"forced": "always"}
    both = app.invoke(
        {"question": UNKNOWN_Q}, {"configurable": {"gate_retrieval": "always"}}, context={"gate_retrieval": "never"}
    )
    assert both["gate_decision"]["retrieve"] is False
    assert app.invoke({"question": KNOWN_Q}, context=AppContext())["gate_decision"]["retrieve"] is False
    mapping = _graph(knn_gate)
    assert mapping.invoke({"question": KNOWN_Q, "path": []}, context={"gate_retrieval": "always"})["path"] == [
        "retrieve"
    ]
    with pytest.raises(ValueError, match="unknown configurable key 'gate_retreival'"):
        mapping.invoke({"question": KNOWN_Q, "path": []}, context={"gate_retreival": "always"})


def test_the_decision_is_in_the_custom_stream_and_once_in_the_events(knn_gate):
    app = _graph(knn_gate)
    chunks = list(app.stream({"question": UNKNOWN_Q, "path": []}, stream_mode="custom"))
    assert [list(c) for c in chunks] == [[DECISION_EVENT]] and chunks[0][DECISION_EVENT]["question"] == UNKNOWN_Q

    async def events():
        return [e async for e in app.astream_events({"question": UNKNOWN_Q, "path": []}, version="v2")]

    decisions = [e for e in asyncio.run(events()) if DECISION_EVENT in (e["name"], *_keys(e["data"].get("chunk")))]
    assert [(e["event"], e["data"]["question"]) for e in decisions] == [("on_custom_event", UNKNOWN_Q)]


def _keys(chunk):
    return list(chunk) if isinstance(chunk, dict) else []
