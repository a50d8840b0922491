"""A gate in a LangGraph graph: a node that writes the decision into the state, and a
conditional-edge function that routes on it. Needs only ``langgraph`` at graph-build
time (the ``langgraph`` extra); nothing here imports it.

A retrieve node of one's own answers a gate that retrieved to decide (a draft-check
gate) over the passages it checked: ``decision_documents(state["gate_decision"])``
gives them as documents, or ``None`` when the retriever must be asked."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import DRAFT, RETRIEVE

from .gate_runnable import DECISION_EVENT, GateRunnable
from .graph_runtime import with_run_context, write_decision

#: State key the node writes the decision to (as a dict).
STATE_DECISION_KEY = "gate_decision"


def gate_node(
    gate: Gate | GateRunnable, *, input_key: str = "question", decision_key: str = STATE_DECISION_KEY
) -> Runnable[Mapping[str, Any], dict[str, Any]]:
    """A graph node deciding on ``state[input_key]`` (a question or a message list, e.g.
    ``"messages"``) and writing the decision dict under ``decision_key``; it runs on the
    event loop under ``ainvoke``/``astream``. The config reaches the gate, so
    per-request control and the decision's custom event work inside the graph; so does
    the gate control in the run's LangGraph ``context`` (``GateContext``), and the
    decision is also written to the custom stream as ``{DECISION_EVENT: decision}``
    (see ``graph_runtime``). A state without ``input_key`` is read as ``GateRunnable``
    reads a dict without its key: its ``"input"`` is the question, and without one it
    gets the gate's recorded fallback decision, its error naming the keys the state has."""
    runnable = gate if isinstance(gate, GateRunnable) else GateRunnable(gate, input_key=input_key)

    # A state without the key is judged whole: the gate runnable reads its "input" or
    # records what it lacks.
    def node(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return _decided(runnable.invoke(state.get(input_key, state), with_run_context(config)), decision_key)

    async def anode(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return _decided(await runnable.ainvoke(state.get(input_key, state), with_run_context(config)), decision_key)

    return RunnableLambda(node, afunc=anode, name="gate")


def _decided(decision: GateDecision, decision_key: str) -> dict[str, Any]:
    """The node's state update, the decision also written to the graph's custom stream."""
    data = decision.to_dict()
    write_decision(DECISION_EVENT, data)
    return {decision_key: data}


def route_on_decision(
    *,
    retrieve: str = "retrieve",
    direct: str = "direct",
    draft: str | None = None,
    decision_key: str = STATE_DECISION_KEY,
) -> Callable[[Mapping[str, Any]], str]:
    """A conditional-edge function: the ``retrieve`` node when the decision in the
    state says so, else ``direct``; with ``draft``, that node when the gate already
    answered (a confident verbalized gate's draft), so no LLM is asked again.

    The edge reads what ``gate_node`` wrote: a state without ``decision_key`` raises
    ``KeyError`` saying so (the gate node must run before this edge, and the state type
    must declare the key, or LangGraph drops it)."""

    def route(state: Mapping[str, Any]) -> str:
        if decision_key not in state:
            raise KeyError(
                f"the state has no {decision_key!r}: run the gate node (gate_node) before this edge, "
                f"and declare {decision_key!r} in the graph's state type so LangGraph keeps it "
                f"(state keys: {sorted(map(str, state))})"
            )
        decision = state[decision_key]
        if not isinstance(decision, GateDecision):  # kept in the state as its dict
            decision = GateDecision.from_dict(decision)
        if decision.route == RETRIEVE:
            return retrieve
        return draft if draft is not None and decision.route == DRAFT else direct

    return route
