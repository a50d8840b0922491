"""The gate as a node and a conditional edge of a real compiled LangGraph graph."""

import asyncio
import operator
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from adaptive_gates import VerbalizedGate
from langchain_adaptive_gates import LangChainChatModel, gate_node, route_on_decision

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
        assert "no 'question' key" in decision["error"] and "path" in decision["error"]


def test_the_gate_node_reads_the_key_it_is_given(knn_gate):
    node = gate_node(knn_gate, input_key="query")
    assert node.invoke({"query": KNOWN_Q})["gate_decision"]["question"] == KNOWN_Q
    assert asyncio.run(node.ainvoke({"query": UNKNOWN_Q}))["gate_decision"]["retrieve"] is True
