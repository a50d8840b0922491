"""gated_router in every invocation mode, over a real SKR-kNN gate (embedded MiniLM)."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda

from adaptive_gates import VerbalizedGate
from langchain_adaptive_gates import DECISION_EVENT, METADATA_KEY, LangChainChatModel, gated_router

from .chat_doubles import UnreachableChatModel, scripted

KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"


def _router(gate, **kwargs):
    return gated_router(
        gate, direct=RunnableLambda(lambda q: f"direct: {q}"), retrieval=RunnableLambda(lambda q: f"rag: {q}"), **kwargs
    )


class _Runs(BaseCallbackHandler):
    def __init__(self):
        self.starts = []
        self.parents = {}  # run id -> (name, parent run id)

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, tags=None, metadata=None, **kwargs):
        self.starts.append((kwargs.get("name"), tags or [], metadata or {}))
        self.parents[run_id] = (kwargs.get("name"), parent_run_id)

    def tree(self):
        """Each run as (its name, its parent's name), sorted."""
        return sorted(
            (name, self.parents[parent][0] if parent in self.parents else None)
            for name, parent in self.parents.values()
        )


def test_invoke_and_batch_route_each_input(knn_gate):
    router = _router(knn_gate)
    assert router.invoke(KNOWN_Q) == f"direct: {KNOWN_Q}"
    assert router.batch([KNOWN_Q, UNKNOWN_Q]) == [f"direct: {KNOWN_Q}", f"rag: {UNKNOWN_Q}"]


def test_async_modes_route_each_input(knn_gate):
    router = _router(knn_gate)

    async def run():
        return (
            await router.ainvoke(UNKNOWN_Q),
            await router.abatch([KNOWN_Q, UNKNOWN_Q]),
            [c async for c in router.astream(KNOWN_Q)],
        )

    one, many, streamed = asyncio.run(run())
    assert one == f"rag: {UNKNOWN_Q}"
    assert many == [f"direct: {KNOWN_Q}", f"rag: {UNKNOWN_Q}"]
    assert "".join(streamed) == f"direct: {KNOWN_Q}"


def test_the_chosen_branch_streams(knn_gate):
    def chunks(q):
        yield from ["rag", ": ", q]

    router = gated_router(knn_gate, direct=RunnableLambda(lambda q: "direct"), retrieval=RunnableLambda(chunks))
    assert list(router.stream(UNKNOWN_Q)) == ["rag", ": ", UNKNOWN_Q]


def test_decision_in_events_metadata_and_tags(knn_gate):
    router = _router(knn_gate)

    async def events():
        return [e async for e in router.astream_events(UNKNOWN_Q, version="v2")]

    collected = asyncio.run(events())
    custom = [e for e in collected if e["event"] == "on_custom_event"]
    assert [e["name"] for e in custom] == [DECISION_EVENT] and custom[0]["data"]["retrieve"] is True
    branch = next(e for e in collected if e["event"] == "on_chain_start" and e["name"] == "retrieve_branch")
    assert "adaptive-gates:retrieve" in branch["tags"] and "adaptive-gates:gate:skr-knn" in branch["tags"]
    assert branch["metadata"][METADATA_KEY]["score"] == custom[0]["data"]["score"]
    runs = _Runs()
    router.invoke(KNOWN_Q, {"callbacks": [runs]})
    direct = next(r for r in runs.starts if r[0] == "direct_branch")
    assert "adaptive-gates:direct" in direct[1] and direct[2][METADATA_KEY]["retrieve"] is False


def test_a_call_is_three_runs_router_gate_and_branch(knn_gate):
    """The router's own steps add no runs: a call traces the router, the gate under it
    and the chosen branch under it (each run costs LangChain ~0.1 ms)."""
    router = _router(knn_gate)
    runs = _Runs()
    router.invoke(UNKNOWN_Q, {"callbacks": [runs]})
    assert runs.tree() == [
        ("gate:skr-knn", "gated_router"),
        ("gated_router", None),
        ("retrieve_branch", "gated_router"),
    ]
    runs = _Runs()
    asyncio.run(router.ainvoke(KNOWN_Q, {"callbacks": [runs]}))
    assert runs.tree() == [("direct_branch", "gated_router"), ("gate:skr-knn", "gated_router"), ("gated_router", None)]


def test_a_batch_is_decided_in_one_decide_batch(knn_gate, monkeypatch):
    calls = []
    decide_batch, adecide_batch = knn_gate.decide_batch, knn_gate.adecide_batch

    async def adecide_spy(questions):
        calls.append(list(questions))
        return await adecide_batch(questions)

    monkeypatch.setattr(knn_gate, "decide_batch", lambda qs: calls.append(list(qs)) or decide_batch(qs))
    monkeypatch.setattr(knn_gate, "adecide_batch", adecide_spy)
    router = _router(knn_gate)
    runs = _Runs()
    assert router.batch([KNOWN_Q, UNKNOWN_Q], {"callbacks": [runs]}) == [f"direct: {KNOWN_Q}", f"rag: {UNKNOWN_Q}"]
    assert asyncio.run(router.abatch([UNKNOWN_Q, KNOWN_Q])) == [f"rag: {UNKNOWN_Q}", f"direct: {KNOWN_Q}"]
    assert calls == [[KNOWN_Q, UNKNOWN_Q], [UNKNOWN_Q, KNOWN_Q]]
    # Each input still has its own router run with its gate and branch under it.
    assert runs.tree() == [
        ("direct_branch", "gated_router"),
        ("gate:skr-knn", "gated_router"),
        ("gate:skr-knn", "gated_router"),
        ("gated_router", None),
        ("gated_router", None),
        ("retrieve_branch", "gated_router"),
    ]


def test_a_failed_input_or_branch_is_its_own_result_blocking_or_awaited(knn_gate):
    """With ``return_exceptions`` a malformed input's error and a failing branch's error
    are that input's result; without it the branch's error is raised. Both paths alike."""

    def no_index(q):
        raise LookupError(f"no index for {q}")

    router = gated_router(knn_gate, direct=RunnableLambda(lambda q: f"direct: {q}"), retrieval=RunnableLambda(no_index))
    inputs, configs = [KNOWN_Q, UNKNOWN_Q, KNOWN_Q], [{}, {}, {"configurable": {"gate_threshold": "high"}}]

    def shown(results):
        return [r if isinstance(r, str) else type(r).__name__ for r in results]

    blocking = router.batch(inputs, configs, return_exceptions=True)
    awaited = asyncio.run(router.abatch(inputs, configs, return_exceptions=True))
    assert shown(blocking) == shown(awaited) == [f"direct: {KNOWN_Q}", "LookupError", "ValueError"]
    assert shown(router.batch([UNKNOWN_Q], return_exceptions=True)) == ["LookupError"]
    with pytest.raises(LookupError, match="no index"):
        router.batch(inputs[:2])
    with pytest.raises(LookupError, match="no index"):
        asyncio.run(router.abatch(inputs[:2]))


def test_draft_answer_skips_the_direct_llm():
    direct_llm = UnreachableChatModel()
    gate = VerbalizedGate(LangChainChatModel(scripted("Paris. certain")), judge=False, top_logprobs=0)
    router = gated_router(gate, direct=direct_llm, retrieval=RunnableLambda(lambda q: "rag"))
    assert router.invoke("What is the capital of France?") == "Paris"
    assert direct_llm.calls == 0
    without_draft = gated_router(
        VerbalizedGate(LangChainChatModel(scripted("Paris. certain")), judge=False, top_logprobs=0),
        direct=RunnableLambda(lambda q: "asked again"),
        retrieval=RunnableLambda(lambda q: "rag"),
        draft=None,
    )
    assert without_draft.invoke("What is the capital of France?") == "asked again"


def test_failing_gate_model_still_answers_through_the_fallback():
    gate = VerbalizedGate(LangChainChatModel(UnreachableChatModel()), judge=False)
    router = _router(gate)
    assert router.invoke(KNOWN_Q) == f"rag: {KNOWN_Q}"
    assert asyncio.run(router.ainvoke(KNOWN_Q)) == f"rag: {KNOWN_Q}"


def test_per_request_control_reaches_the_router(knn_gate):
    router = _router(knn_gate)
    assert router.invoke(KNOWN_Q, {"configurable": {"gate_retrieval": "always"}}) == f"rag: {KNOWN_Q}"
    assert router.batch([UNKNOWN_Q, UNKNOWN_Q], [{}, {"configurable": {"gate_retrieval": "never"}}]) == [
        f"rag: {UNKNOWN_Q}",
        f"direct: {UNKNOWN_Q}",
    ]


def test_dict_inputs_reach_the_branches_unchanged(knn_gate):
    router = gated_router(knn_gate, direct=RunnableLambda(lambda x: x), retrieval=RunnableLambda(lambda x: x))
    value = {"question": UNKNOWN_Q, "language": "en"}
    assert router.invoke(value) == value


def test_the_routers_gate_reads_the_key_it_is_given_and_records_a_missing_one(knn_gate):
    router = _router(knn_gate, input_key="query", include_decision=True)
    known, unknown = router.batch([{"query": KNOWN_Q}, {"query": UNKNOWN_Q}])
    assert (known["route"], unknown["route"]) == ("direct", "retrieve")
    assert known["gate_decision"]["question"] == KNOWN_Q
    missing = asyncio.run(router.ainvoke({"question": KNOWN_Q}))
    assert missing["route"] == "retrieve" and missing["answer"] == "rag: " + str({"question": KNOWN_Q})
    assert "no 'query' or 'input' key" in missing["gate_decision"]["error"]


class _CountingExecutor(ThreadPoolExecutor):
    """The event loop's default executor, counting the calls sent to a worker thread."""

    def __init__(self):
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_async_routing_adds_no_thread_hop_to_the_gates(knn_gate):
    """On the async path only the gate's model work leaves the event loop: the
    router's own steps (pairing, routing, unwrapping) run on it."""

    async def echo(q):
        return q

    router = gated_router(knn_gate, direct=RunnableLambda(echo), retrieval=RunnableLambda(echo))

    async def hops():
        executor = _CountingExecutor()
        asyncio.get_running_loop().set_default_executor(executor)
        await knn_gate.adecide(KNOWN_Q)
        by_gate, executor.submitted = executor.submitted, 0
        assert await router.ainvoke(KNOWN_Q) == KNOWN_Q
        return by_gate, executor.submitted

    by_gate, by_router = asyncio.run(hops())
    assert by_gate >= 1 and by_router == by_gate
