"""The adaptive-RAG workflow run by LlamaIndex's workflow engine over a real
VectorStoreIndex and the embedded LLM: each route driven on purpose (the kNN gate's
own memory; a scripted chat model behind a real ``VerbalizedGate`` for the draft), its
events streamed, and the gate step reused in a workflow of one's own."""

from __future__ import annotations

import pytest
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent
from llama_index.core.workflow import Context, StartEvent, StopEvent, Workflow, step
from llama_index.query_engine.adaptive_gates import DEFAULT_DIRECT_PROMPT, METADATA_KEY, ROUTE_KEY
from llama_index.selectors.adaptive_gates import GateDecisionEvent
from llama_index.workflows.adaptive_gates import (
    AdaptiveRAGWorkflow,
    AnswerDirectlyEvent,
    DraftAnswerEvent,
    GateRouteEvent,
    NodesRetrievedEvent,
    RetrieveEvent,
    gate_route_event,
)

from adaptive_gates import BackendError, Gate, VerbalizedGate
from adaptive_gates.models.chat.base import ChatReply

from .conftest import KNOWN, UNKNOWN
from .doubles import ScriptedChat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KNOWN_Q, UNKNOWN_Q = KNOWN[0], UNKNOWN[0]


async def _run(workflow: Workflow, query: str) -> tuple[list, object]:
    """The events the run streamed, and its result."""
    handler = workflow.run(query=query)
    streamed = [event async for event in handler.stream_events() if not isinstance(event, StopEvent)]
    return streamed, await handler


async def test_an_unknown_question_is_retrieved_for_and_synthesised(index, knn_gate, llm, recorder):
    workflow = AdaptiveRAGWorkflow(knn_gate, index, llm=llm, similarity_top_k=2, timeout=300)
    streamed, response = await _run(workflow, UNKNOWN_Q)
    assert [type(e) for e in streamed] == [RetrieveEvent, NodesRetrievedEvent]
    routed, retrieved = streamed
    assert routed.query == UNKNOWN_Q and routed.gate_decision.retrieve is True
    plain = index.as_retriever(similarity_top_k=2).retrieve(UNKNOWN_Q)
    assert [n.node.node_id for n in retrieved.nodes] == [n.node.node_id for n in plain]
    assert response.metadata[ROUTE_KEY] == "retrieve" and response.metadata[METADATA_KEY] == routed.decision
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in plain]
    assert response.response.strip()
    assert [e.query for e in recorder.of(GateDecisionEvent)] == [UNKNOWN_Q]


async def test_a_known_question_is_answered_by_the_llm_alone(index, knn_gate, llm, recorder, loop_ticks):
    expected = llm.predict(DEFAULT_DIRECT_PROMPT, query_str=KNOWN_Q)
    recorder.events.clear()
    async with loop_ticks:
        streamed, response = await _run(AdaptiveRAGWorkflow(knn_gate, index.as_retriever(), llm=llm), KNOWN_Q)
    assert loop_ticks.count > 0  # the gate and the LLM ran off the event loop
    assert [type(e) for e in streamed] == [AnswerDirectlyEvent]
    assert response.metadata[ROUTE_KEY] == "direct" and response.source_nodes == []
    assert response.response == expected and "shakespeare" in expected.lower()
    assert len(recorder.of(LLMChatStartEvent)) == 1


async def test_a_confident_draft_ends_the_run_with_no_llm_call(index, llm, recorder):
    gate = VerbalizedGate(ScriptedChat(ChatReply("Paris, certain.")))
    streamed, response = await _run(AdaptiveRAGWorkflow(gate, index, llm=llm), "What is the capital of France?")
    (routed,) = streamed
    assert isinstance(routed, DraftAnswerEvent) and routed.draft_answer == "Paris"
    assert response.response == "Paris" and response.metadata[ROUTE_KEY] == "draft"
    assert recorder.of(LLMChatStartEvent) == []
    # without draft reuse the LLM answers
    streamed, response = await _run(
        AdaptiveRAGWorkflow(gate, index, llm=llm, reuse_draft=False), "What is the capital of France?"
    )
    assert [type(e) for e in streamed] == [AnswerDirectlyEvent] and response.metadata[ROUTE_KEY] == "direct"
    assert len(recorder.of(LLMChatStartEvent)) == 1


async def test_a_failing_gate_llm_falls_back_to_retrieval(index, llm):
    gate = VerbalizedGate(ScriptedChat(BackendError("the chat server is down")))
    streamed, response = await _run(AdaptiveRAGWorkflow(gate, index, llm=llm, similarity_top_k=1), UNKNOWN_Q)
    assert [type(e) for e in streamed] == [RetrieveEvent, NodesRetrievedEvent]
    assert "the chat server is down" in response.metadata[METADATA_KEY]["error"]
    assert len(response.source_nodes) == 1


class _Labeller(Workflow):
    """A workflow of one's own reusing the gate step: it only names the route."""

    def __init__(self, gate: Gate) -> None:
        super().__init__(timeout=120)
        self.gate = gate

    @step
    async def decide(self, ev: StartEvent) -> RetrieveEvent | AnswerDirectlyEvent | DraftAnswerEvent:
        return await gate_route_event(self.gate, ev.get("query"))

    @step
    async def retrieve(self, ev: RetrieveEvent) -> StopEvent:
        return _label(ev)

    @step
    async def direct(self, ctx: Context, ev: AnswerDirectlyEvent | DraftAnswerEvent) -> StopEvent:
        return _label(ev)


def _label(ev: GateRouteEvent) -> StopEvent:
    return StopEvent(result=f"{type(ev).__name__}: {ev.query}")


async def test_the_gate_step_routes_a_workflow_of_ones_own(knn_gate):
    labeller = _Labeller(knn_gate)
    assert await labeller.run(query=KNOWN_Q) == f"AnswerDirectlyEvent: {KNOWN_Q}"
    assert await labeller.run(query=UNKNOWN_Q) == f"RetrieveEvent: {UNKNOWN_Q}"


async def test_bad_input_is_refused_clearly(index, knn_gate):
    with pytest.raises(TypeError, match="query must be a str"):
        await gate_route_event(knn_gate, None)
    with pytest.raises(TypeError, match="gate must be an adaptive_gates Gate"):
        AdaptiveRAGWorkflow("skr", index)
    with pytest.raises(TypeError, match="retriever must be a LlamaIndex BaseRetriever or index"):
        AdaptiveRAGWorkflow(knn_gate, "index")
