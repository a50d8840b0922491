"""The adaptive query engine over a real VectorStoreIndex, the embedded LLM and real gates.

The kNN gate is deterministic on its own memory (KNOWN questions answer directly,
UNKNOWN ones retrieve), so each route is driven on purpose. The draft route is pinned
down with a scripted core chat model behind a real ``VerbalizedGate``, and one
real-model run checks what holds whatever the 135M model says.
"""

from __future__ import annotations

import pytest
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.prompts import PromptTemplate
from llama_index.query_engine.adaptive_gates import (
    DEFAULT_DIRECT_PROMPT,
    METADATA_KEY,
    ROUTE_KEY,
    AdaptiveQueryEngine,
)
from llama_index.selectors.adaptive_gates import GateDecisionEvent, GateLLMCallEvent

from adaptive_gates import BackendError, NotFittedError, SKRKnnGate, VerbalizedGate
from adaptive_gates.models.chat.base import ChatReply

from .buggy_gates import buggy_gate
from .conftest import KNOWN, UNKNOWN
from .doubles import ScriptedChat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KNOWN_Q = KNOWN[0]  # "Who wrote Hamlet?": its own neighbour in the memory, labelled known
UNKNOWN_Q = UNKNOWN[0]  # the Tuvalu census question, labelled unknown


@pytest.fixture(scope="module")
def engine(brief_index, knn_gate, brief_llm) -> AdaptiveQueryEngine:
    return AdaptiveQueryEngine.from_index(brief_index, knn_gate, llm=brief_llm, similarity_top_k=2)


def _ids(nodes) -> list[str]:
    return [n.node.node_id for n in nodes]


def test_a_known_question_is_answered_by_the_llm_alone(brief_index, knn_gate, llm, recorder):
    # replies long enough to name the author: this test reads what the LLM answered
    engine = AdaptiveQueryEngine.from_index(brief_index, knn_gate, llm=llm, similarity_top_k=2)
    response = engine.query(KNOWN_Q)
    assert isinstance(response, Response) and response.source_nodes == []
    decision = response.metadata[METADATA_KEY]
    assert decision["retrieve"] is False and decision["gate"] == "skr-knn" and decision["question"] == KNOWN_Q
    assert response.metadata[ROUTE_KEY] == "direct"
    assert response.response == llm.predict(DEFAULT_DIRECT_PROMPT, query_str=KNOWN_Q)
    assert "shakespeare" in response.response.lower()


def test_an_unknown_question_is_synthesised_over_the_retrieved_nodes(engine, brief_index):
    response = engine.query(UNKNOWN_Q)
    decision = response.metadata[METADATA_KEY]
    assert decision["retrieve"] is True and decision["error"] is None
    assert response.metadata[ROUTE_KEY] == "retrieve"
    assert _ids(response.source_nodes) == _ids(brief_index.as_retriever(similarity_top_k=2).retrieve(UNKNOWN_Q))
    assert response.response.strip() and response.response != "Empty Response"


def test_retrieved_nodes_go_through_the_node_postprocessors(brief_index, knn_gate, brief_llm):
    retrieved = brief_index.as_retriever(similarity_top_k=3).retrieve(UNKNOWN_Q)
    cutoff = SimilarityPostprocessor(similarity_cutoff=retrieved[1].score)  # keeps the best two
    engine = AdaptiveQueryEngine.from_index(
        brief_index, knn_gate, llm=brief_llm, similarity_top_k=3, node_postprocessors=[cutoff]
    )
    response = engine.query(UNKNOWN_Q)
    assert _ids(response.source_nodes) == _ids(retrieved[:2])


async def test_aquery_takes_the_same_routes_without_blocking_the_loop(engine, loop_ticks):
    async with loop_ticks:
        direct, retrieved = await engine.aquery(KNOWN_Q), await engine.aquery(UNKNOWN_Q)
    assert loop_ticks.count > 0, "the event loop was blocked while the engine worked"
    assert direct.metadata[ROUTE_KEY] == "direct" and retrieved.metadata[ROUTE_KEY] == "retrieve"
    assert direct.response == engine.query(KNOWN_Q).response
    sync = engine.query(UNKNOWN_Q)
    assert retrieved.response == sync.response and _ids(retrieved.source_nodes) == _ids(sync.source_nodes)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_decision_event_fires_inside_the_engine_span(engine, recorder, spans, mode):
    if mode == "sync":
        response = engine.query(KNOWN_Q)
    else:
        response = await engine.aquery(KNOWN_Q)
    (event,) = recorder.of(GateDecisionEvent)
    assert event.query == KNOWN_Q and event.decision == response.metadata[METADATA_KEY]
    method = "_query" if mode == "sync" else "_aquery"
    assert event.span_id.startswith(f"AdaptiveQueryEngine.{method}-")
    parents = {s.id_: s.parent_id for s in spans.completed_spans}
    # the engine's span sits inside LlamaIndex's own query span
    assert parents[event.span_id].startswith(f"AdaptiveQueryEngine.{method.lstrip('_')}-")


def test_a_confident_draft_is_the_answer_without_another_llm_call(brief_index, brief_llm, recorder):
    chat = ScriptedChat(ChatReply("Paris, certain."))
    engine = AdaptiveQueryEngine.from_index(brief_index, VerbalizedGate(chat), llm=brief_llm)
    response = engine.query("What is the capital of France?")
    assert response.response == "Paris" and response.metadata[ROUTE_KEY] == "draft"
    assert response.metadata[METADATA_KEY]["draft_answer"] == "Paris" and response.source_nodes == []
    assert len(chat.calls) == 1 and recorder.of(LLMChatStartEvent) == []
    (call,) = recorder.of(GateLLMCallEvent)  # the gate's own request, inside the engine's span
    assert call.call["reply"] == "Paris, certain." and call.span_id.startswith("AdaptiveQueryEngine._query-")


def test_reuse_draft_off_asks_the_llm(brief_index, brief_llm, recorder):
    gate = VerbalizedGate(ScriptedChat(ChatReply("Paris, certain.")))
    engine = AdaptiveQueryEngine.from_index(brief_index, gate, llm=brief_llm, reuse_draft=False)
    response = engine.query("What is the capital of France?")
    assert response.metadata[ROUTE_KEY] == "direct" and response.metadata[METADATA_KEY]["draft_answer"] == "Paris"
    assert len(recorder.of(LLMChatStartEvent)) == 1
    assert response.response == brief_llm.predict(DEFAULT_DIRECT_PROMPT, query_str="What is the capital of France?")


def test_an_uncertain_reply_retrieves(brief_index, brief_llm):
    engine = AdaptiveQueryEngine.from_index(
        brief_index, VerbalizedGate(ScriptedChat(ChatReply("Lyon (uncertain)"))), llm=brief_llm
    )
    response = engine.query("What is the capital of France?")
    assert response.metadata[ROUTE_KEY] == "retrieve" and response.source_nodes
    assert response.metadata[METADATA_KEY]["draft_answer"] is None


def test_the_real_verbalized_gate_either_drafts_or_retrieves(brief_index, brief_llm, recorder):
    # SmolLM2-135M rarely states a certainty; with the judgement's first-token
    # probabilities it decides this one (a draft here), but any verdict must be followed.
    engine = AdaptiveQueryEngine.from_index(brief_index, VerbalizedGate(unparseable="first-token"), llm=brief_llm)
    response = engine.query("How many legs does a spider have?")
    decision = response.metadata[METADATA_KEY]
    calls = recorder.of(GateLLMCallEvent)
    assert len(calls) == decision["llm_calls"] >= 1
    assert all(c.span_id.startswith("AdaptiveQueryEngine._query-") for c in calls)
    if decision["retrieve"]:
        assert response.metadata[ROUTE_KEY] == "retrieve" and response.source_nodes
    else:
        assert response.metadata[ROUTE_KEY] == "draft" and response.response == decision["draft_answer"]
        assert recorder.of(LLMChatStartEvent) == [], "the draft was answered again"


async def test_a_failing_gate_llm_ends_in_its_fallback_and_the_query_still_answers(brief_index, brief_llm, recorder):
    gate = VerbalizedGate(ScriptedChat(BackendError("the chat server is down")))
    engine = AdaptiveQueryEngine.from_index(brief_index, gate, llm=brief_llm, similarity_top_k=2)
    for response in (engine.query(UNKNOWN_Q), await engine.aquery(UNKNOWN_Q)):
        decision = response.metadata[METADATA_KEY]
        assert decision["retrieve"] is True and "the chat server is down" in decision["error"]
        assert response.metadata[ROUTE_KEY] == "retrieve" and len(response.source_nodes) == 2
        assert response.response.strip()
    assert [e.decision["error"] for e in recorder.of(GateDecisionEvent)] == [decision["error"]] * 2
    assert all("the chat server is down" in c.call["error"] for c in recorder.of(GateLLMCallEvent))


async def test_a_gate_that_raises_makes_the_engine_retrieve(brief_index, core_embedder, brief_llm):
    engine = AdaptiveQueryEngine.from_index(brief_index, buggy_gate(core_embedder), llm=brief_llm, similarity_top_k=1)
    for response in (engine.query(KNOWN_Q), await engine.aquery(KNOWN_Q)):
        decision = response.metadata[METADATA_KEY]
        assert decision["retrieve"] is True and decision["error"].startswith("the gate raised AttributeError")
        assert decision["question"] == KNOWN_Q and decision["score"] is None
        assert response.metadata[ROUTE_KEY] == "retrieve" and len(response.source_nodes) == 1


async def test_an_unfitted_gate_raises_not_fitted(brief_index, core_embedder, brief_llm):
    unfitted = SKRKnnGate(core_embedder, k=1)
    engine = AdaptiveQueryEngine.from_index(brief_index, unfitted, llm=brief_llm, similarity_top_k=1)
    with pytest.raises(NotFittedError, match="SKRKnnGate is not fitted"):
        engine.query(KNOWN_Q)
    with pytest.raises(NotFittedError, match="SKRKnnGate is not fitted"):
        await engine.aquery(KNOWN_Q)


def test_the_direct_prompt_is_a_prompt_of_the_engine(brief_index, knn_gate, brief_llm):
    engine = AdaptiveQueryEngine.from_index(brief_index, knn_gate, llm=brief_llm)
    prompts = engine.get_prompts()
    assert prompts["direct_prompt"].format(query_str=KNOWN_Q) == DEFAULT_DIRECT_PROMPT.format(query_str=KNOWN_Q)
    assert "response_synthesizer:text_qa_template" in prompts
    terse = PromptTemplate("Name the author in one word. {query_str}")
    engine.update_prompts({"direct_prompt": terse})
    assert engine.query(KNOWN_Q).response == brief_llm.predict(terse, query_str=KNOWN_Q)


@pytest.fixture(scope="module")
def streaming(brief_index, knn_gate, streaming_llm) -> AdaptiveQueryEngine:
    return AdaptiveQueryEngine.from_index(brief_index, knn_gate, llm=streaming_llm, similarity_top_k=2, streaming=True)


@pytest.fixture(scope="module")
def brief(brief_index, knn_gate, streaming_llm) -> AdaptiveQueryEngine:
    """The streaming engine's twin, answering whole with the same short replies."""
    return AdaptiveQueryEngine.from_index(brief_index, knn_gate, llm=streaming_llm, similarity_top_k=2)


@pytest.mark.parametrize("question,route", [(KNOWN_Q, "direct"), (UNKNOWN_Q, "retrieve")])
def test_streaming_responses_stream_token_by_token(streaming, brief_answers, recorder, question, route):
    response = streaming.query(question)
    assert isinstance(response, StreamingResponse) and response.metadata[ROUTE_KEY] == route
    (event,) = recorder.of(GateDecisionEvent)
    assert response.metadata[METADATA_KEY] == event.decision and event.decision["retrieve"] is (route == "retrieve")
    chunks = list(response.response_gen)
    assert len(chunks) > 1, "a multi-token answer came as one chunk"
    answered = brief_answers(question)
    assert "".join(chunks) == answered.response and _ids(response.source_nodes) == _ids(answered.source_nodes)


@pytest.mark.parametrize("question,route", [(KNOWN_Q, "direct"), (UNKNOWN_Q, "retrieve")])
async def test_async_streaming_responses_stream_token_by_token(streaming, brief_answers, loop_ticks, question, route):
    async with loop_ticks:
        response = await streaming.aquery(question)
        chunks = [t async for t in response.async_response_gen()]
    assert loop_ticks.count > 0, "the event loop was blocked while the engine streamed"
    assert isinstance(response, AsyncStreamingResponse) and response.metadata[ROUTE_KEY] == route
    assert response.metadata[METADATA_KEY]["question"] == question
    assert len(chunks) > 1 and "".join(chunks) == brief_answers(question).response


async def test_a_streamed_draft_is_one_piece_without_an_llm_call(brief_index, brief_llm, recorder):
    drafting = AdaptiveQueryEngine.from_index(
        brief_index, VerbalizedGate(ScriptedChat(ChatReply("Paris, certain."))), llm=brief_llm, streaming=True
    )
    response = drafting.query("What is the capital of France?")
    assert list(response.response_gen) == ["Paris"] and response.metadata[ROUTE_KEY] == "draft"
    aresponse = await drafting.aquery("What is the capital of France?")
    assert [t async for t in aresponse.async_response_gen()] == ["Paris"]
    assert aresponse.metadata[METADATA_KEY]["draft_answer"] == "Paris"
    assert recorder.of(LLMChatStartEvent) == [], "the draft was answered again"


def test_refuses_what_is_not_a_gate(brief_index):
    with pytest.raises(TypeError, match="gate must be an adaptive_gates Gate"):
        AdaptiveQueryEngine.from_index(brief_index, "skr-knn")
