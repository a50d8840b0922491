"""``astream_events(include_names=[...])`` naming the router or the gate runnable keeps
the gate's decision event (LangChain filters a custom event by the event's own name),
over a real SKR-kNN gate in a real router."""

import asyncio

from langchain_core.runnables import RunnableLambda

from langchain_adaptive_gates import DECISION_EVENT, GateRunnable, gated_router

UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"


def _events(runnable, **filters):
    async def collect():
        return [(e["event"], e["name"]) async for e in runnable.astream_events(UNKNOWN_Q, version="v2", **filters)]

    return asyncio.run(collect())


def test_naming_the_router_keeps_its_decision_event(knn_gate):
    router = gated_router(
        knn_gate, direct=RunnableLambda(lambda q: "direct"), retrieval=RunnableLambda(lambda q: "rag")
    )
    events = _events(router, include_names=["gated_router"])
    assert events.count(("on_custom_event", DECISION_EVENT)) == 1
    assert {name for _, name in events} == {"gated_router", DECISION_EVENT}
    assert ("on_custom_event", DECISION_EVENT) not in _events(router, include_names=["other"])


def test_naming_the_gate_runnable_keeps_its_decision_event(knn_gate):
    gate = GateRunnable(knn_gate)
    events = _events(gate, include_names=[gate.get_name()])
    assert events == [
        ("on_chain_start", "gate:skr-knn"),
        ("on_custom_event", DECISION_EVENT),
        ("on_chain_end", "gate:skr-knn"),
    ]
