"""The draft engine as the direct route of a real ``RouterQueryEngine`` with a
``GateSelector``: a confident verbalized gate's draft (pinned down by a scripted core
chat model behind a real ``VerbalizedGate``) is the answer with no call to the embedded
LLM; a decision without a draft is answered by that LLM once. LLM calls are counted
with a real instrumentation event handler."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.indices import EmptyIndex
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.tools import QueryEngineTool
from llama_index.query_engine.adaptive_gates import (
    DEFAULT_DIRECT_PROMPT,
    METADATA_KEY,
    ROUTE_KEY,
    DraftQueryEngine,
)
from llama_index.selectors.adaptive_gates import GateSelector, decision_of

from adaptive_gates import Gate, VerbalizedGate
from adaptive_gates.models.chat.base import ChatReply

from .conftest import KNOWN, UNKNOWN
from .doubles import ScriptedChat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HAMLET = KNOWN[0]  # "Who wrote Hamlet?": the kNN gate answers it directly, with no draft


def _router(gate: Gate, direct: DraftQueryEngine, index, llm) -> RouterQueryEngine:
    return RouterQueryEngine(
        selector=GateSelector(gate),
        query_engine_tools=[
            QueryEngineTool.from_defaults(direct, description="the LLM alone"),
            QueryEngineTool.from_defaults(
                index.as_query_engine(llm=llm, similarity_top_k=1), description="the documents"
            ),
        ],
    )


def _drafting_gate() -> VerbalizedGate:
    return VerbalizedGate(ScriptedChat(ChatReply("William Shakespeare, certain.")))


async def test_a_confident_draft_is_returned_with_no_llm_call(index, llm, recorder):
    router = _router(_drafting_gate(), DraftQueryEngine(llm), index, llm)
    for response in (router.query(HAMLET), await router.aquery(HAMLET)):
        assert response.response == "William Shakespeare" and response.metadata[ROUTE_KEY] == "draft"
        assert response.metadata[METADATA_KEY]["draft_answer"] == "William Shakespeare"
        assert decision_of(response.metadata["selector_result"]).draft_answer == "William Shakespeare"
    assert recorder.of(LLMChatStartEvent) == []


async def test_without_a_draft_the_llm_answers_once(index, llm, knn_gate, recorder):
    router = _router(knn_gate, DraftQueryEngine(llm), index, llm)
    expected = llm.predict(DEFAULT_DIRECT_PROMPT, query_str=HAMLET)
    recorder.events.clear()
    for response in (router.query(HAMLET), await router.aquery(HAMLET)):
        assert response.metadata[ROUTE_KEY] == "direct" and response.response == expected
        assert response.metadata[METADATA_KEY]["gate"] == "skr-knn"
    assert len(recorder.of(LLMChatStartEvent)) == 2  # once per query


async def test_concurrent_queries_keep_their_own_decision(index, llm, knn_gate, recorder):
    direct = DraftQueryEngine(llm)  # one engine behind both routers
    drafting, plain = _router(_drafting_gate(), direct, index, llm), _router(knn_gate, direct, index, llm)
    drafted, answered = await asyncio.gather(drafting.aquery(HAMLET), plain.aquery(HAMLET))
    assert drafted.metadata[ROUTE_KEY] == "draft" and drafted.response == "William Shakespeare"
    assert answered.metadata[ROUTE_KEY] == "direct" and answered.metadata[METADATA_KEY]["gate"] == "skr-knn"
    assert len(recorder.of(LLMChatStartEvent)) == 1


def test_a_decision_is_used_once_and_only_for_its_question(index, llm, recorder):
    direct = DraftQueryEngine(llm)
    retrieved = _router(_drafting_gate(), direct, index, llm).query(HAMLET)
    assert retrieved.metadata[ROUTE_KEY] == "draft"
    again = direct.query(HAMLET)  # asked alone afterwards: no selector decided this query
    other = direct.query(UNKNOWN[0])
    assert again.metadata[ROUTE_KEY] == other.metadata[ROUTE_KEY] == "direct"
    assert METADATA_KEY not in again.metadata and again.response.strip()
    assert len(recorder.of(LLMChatStartEvent)) == 2


def test_a_query_engine_answers_when_there_is_no_draft(index, llm, knn_gate):
    inner = EmptyIndex().as_query_engine(llm=llm)
    response = _router(knn_gate, DraftQueryEngine(inner), index, llm).query(HAMLET)
    assert response.metadata[ROUTE_KEY] == "direct"
    assert response.response == inner.query(HAMLET).response


def test_a_wrong_answerer_is_refused():
    with pytest.raises(TypeError, match="answerer must be a LlamaIndex LLM or query engine"):
        DraftQueryEngine("smollm2")
