"""The gate as a node and a conditional edge of a real compiled LangGraph graph."""

import asyncio
import operator
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph

from langchain_adaptive_gates import gate_node, route_on_decision

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
