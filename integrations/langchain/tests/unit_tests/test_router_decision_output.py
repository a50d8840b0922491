"""``include_decision=True``: the answer with its decision and route in every mode,
streamed as ``RunnablePassthrough.assign`` streams, over a real SKR-kNN gate."""

import asyncio
import functools
import operator

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.utils import AddableDict

from langchain_adaptive_gates import (
    ANSWER_KEY,
    DECISION_EVENT,
    DECISION_KEY,
    ROUTE_KEY,
    AdaptiveGatesChatModel,
    gated_router,
)

from .test_router import KNOWN_Q, UNKNOWN_Q, _Runs


def _pieces(label):
    """A branch answering ``label: question`` in three chunks, on both paths."""

    def stream(q):
        yield from [label, ": ", q]

    async def astream(q):
        for piece in stream(q):
            yield piece

    return RunnableLambda(stream, afunc=astream)


@pytest.fixture
def router(knn_gate):
    return gated_router(knn_gate, direct=_pieces("direct"), retrieval=_pieces("rag"), include_decision=True)


def _check(out, question, route, answer):
    assert set(out) == {ANSWER_KEY, DECISION_KEY, ROUTE_KEY}
    assert out[ANSWER_KEY] == answer and out[ROUTE_KEY] == route
    assert out[DECISION_KEY]["question"] == question
    assert out[DECISION_KEY]["retrieve"] is (route == "retrieve")


def test_invoke_and_batch_answer_with_the_decision(router):
    _check(router.invoke(KNOWN_Q), KNOWN_Q, "direct", f"direct: {KNOWN_Q}")
    known, unknown = router.batch([KNOWN_Q, UNKNOWN_Q])
    _check(known, KNOWN_Q, "direct", f"direct: {KNOWN_Q}")
    _check(unknown, UNKNOWN_Q, "retrieve", f"rag: {UNKNOWN_Q}")


def test_async_calls_answer_with_the_decision(router):
    async def run():
        return await router.ainvoke(UNKNOWN_Q), await router.abatch([UNKNOWN_Q, KNOWN_Q])

    one, (unknown, known) = asyncio.run(run())
    _check(one, UNKNOWN_Q, "retrieve", f"rag: {UNKNOWN_Q}")
    _check(unknown, UNKNOWN_Q, "retrieve", f"rag: {UNKNOWN_Q}")
    _check(known, KNOWN_Q, "direct", f"direct: {KNOWN_Q}")


def _streamed_as_assign_streams(chunks, question, route, answer):
    """The decision first, then each of the answer's chunks; together the whole output."""
    assert all(isinstance(c, AddableDict) for c in chunks)
    assert set(chunks[0]) == {DECISION_KEY, ROUTE_KEY}
    assert chunks[1:] == [{ANSWER_KEY: piece} for piece in [route_label(route), ": ", question]]
    _check(functools.reduce(operator.add, chunks), question, route, answer)


def route_label(route):
    return "rag" if route == "retrieve" else route


def test_stream_and_astream_send_the_decision_then_the_answers_chunks(router):
    _streamed_as_assign_streams(list(router.stream(UNKNOWN_Q)), UNKNOWN_Q, "retrieve", f"rag: {UNKNOWN_Q}")

    async def chunks():
        return [c async for c in router.astream(KNOWN_Q)]

    _streamed_as_assign_streams(asyncio.run(chunks()), KNOWN_Q, "direct", f"direct: {KNOWN_Q}")


def test_astream_events_carry_the_decision_event_chunks_and_output(router):
    async def events():
        return [e async for e in router.astream_events(UNKNOWN_Q, version="v2")]

    collected = asyncio.run(events())
    (custom,) = [e for e in collected if e["event"] == "on_custom_event"]
    assert custom["name"] == DECISION_EVENT
    streamed = [
        e["data"]["chunk"] for e in collected if e["event"] == "on_chain_stream" and e["name"] == "gated_router"
    ]
    _streamed_as_assign_streams(streamed, UNKNOWN_Q, "retrieve", f"rag: {UNKNOWN_Q}")
    assert streamed[0][DECISION_KEY]["score"] == custom["data"]["score"]
    branch = [
        e["data"]["chunk"] for e in collected if e["event"] == "on_chain_stream" and e["name"] == "retrieve_branch"
    ]
    assert branch == ["rag", ": ", UNKNOWN_Q]
    (end,) = [e for e in collected if e["event"] == "on_chain_end" and e["name"] == "gated_router"]
    _check(end["data"]["output"], UNKNOWN_Q, "retrieve", f"rag: {UNKNOWN_Q}")


def test_the_decision_adds_no_run(router):
    runs = _Runs()
    router.invoke(UNKNOWN_Q, {"callbacks": [runs]})
    assert runs.tree() == [
        ("gate:skr-knn", "gated_router"),
        ("gated_router", None),
        ("retrieve_branch", "gated_router"),
    ]


def test_a_real_chat_chain_streams_the_same_answer_it_gives(knn_gate, one_torch_thread):
    prompt = ChatPromptTemplate.from_messages([("human", "{question}")])
    chain = prompt | AdaptiveGatesChatModel(max_tokens=4) | StrOutputParser()
    router = gated_router(knn_gate, direct=chain, retrieval=chain, include_decision=True)
    question = {"question": KNOWN_Q}
    invoked = router.invoke(question)
    chunks = list(router.stream(question))
    assert chunks[0][ROUTE_KEY] == invoked[ROUTE_KEY] == "direct"
    assert "".join(c[ANSWER_KEY] for c in chunks[1:]) == invoked[ANSWER_KEY] != ""
