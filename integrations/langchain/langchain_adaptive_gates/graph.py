"""A gate in a LangGraph graph: a node that writes the decision into the state, and a
conditional-edge function that routes on it. Needs only ``langgraph`` at graph-build
time (the ``langgraph`` extra); nothing here imports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from adaptive_gates import Gate, GateDecision

from .gate_runnable import GateRunnable

#: State key the node writes the decision to (as a dict).
STATE_DECISION_KEY = "gate_decision"


def gate_node(
    gate: Gate | GateRunnable, *, input_key: str = "question", decision_key: str = STATE_DECISION_KEY
) -> Callable[..., Any]:
    """A graph node (async-capable) deciding on ``state[input_key]`` (a question or a
    message list, e.g. ``"messages"``) and writing the decision dict under
    ``decision_key``. The config reaches the gate, so per-request control and the
    decision's custom event work inside the graph."""
    runnable = gate if isinstance(gate, GateRunnable) else GateRunnable(gate)

    def node(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {decision_key: runnable.invoke(state[input_key], config).to_dict()}

    return node


def route_on_decision(
    *, retrieve: str = "retrieve", direct: str = "direct", decision_key: str = STATE_DECISION_KEY
) -> Callable[[Mapping[str, Any]], str]:
    """A conditional-edge function: the ``retrieve`` node when the decision in the
    state says so, else ``direct``."""

    def route(state: Mapping[str, Any]) -> str:
        decision = state[decision_key]
        wants = decision.retrieve if isinstance(decision, GateDecision) else decision["retrieve"]
        return retrieve if wants else direct

    return route
