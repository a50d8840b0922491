"""An empty query is refused with the package's ``InvalidQuestionError`` by every engine,
selector, retriever, postprocessor and the workflow, before anything is retrieved: the
gate's fallback would retrieve, and LlamaIndex's ``SimpleVectorStore`` given no text
fails with a bare ``TypeError`` on the missing query embedding."""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.indices import EmptyIndex
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.tools import QueryEngineTool
from llama_index.postprocessor.adaptive_gates import SeaKRRerank
from llama_index.query_engine.adaptive_gates import (
    AdaptiveChatEngine,
    AdaptiveContextChatEngine,
    AdaptiveQueryEngine,
    DraftQueryEngine,
)
from llama_index.retrievers.adaptive_gates import GatedRetriever, GatePassagesRetriever
from llama_index.selectors.adaptive_gates import GateSelector
from llama_index.workflows.adaptive_gates import AdaptiveRAGWorkflow

from adaptive_gates import InvalidQuestionError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EMPTY = ["", "  \n"]


@pytest.fixture(scope="module")
def engine(index, knn_gate, llm) -> AdaptiveQueryEngine:
    return AdaptiveQueryEngine.from_index(index, knn_gate, llm=llm, similarity_top_k=1)


def test_the_vector_store_itself_fails_on_an_empty_query(index):
    """What the package's check stands in front of."""
    with pytest.raises(TypeError):
        index.as_retriever().retrieve("")


@pytest.mark.parametrize("query", EMPTY)
async def test_the_query_engine_and_router_refuse_it(engine, index, knn_gate, llm, query):
    router = RouterQueryEngine(
        selector=GateSelector(knn_gate),
        query_engine_tools=[
            QueryEngineTool.from_defaults(EmptyIndex().as_query_engine(llm=llm), description="the LLM alone"),
            QueryEngineTool.from_defaults(index.as_query_engine(llm=llm), description="the documents"),
        ],
        llm=llm,
    )
    for component in (engine, router, DraftQueryEngine(llm)):
        with pytest.raises(InvalidQuestionError, match="the query is empty"):
            component.query(query)
        with pytest.raises(InvalidQuestionError, match="the query is empty"):
            await component.aquery(query)


@pytest.mark.parametrize("query", EMPTY)
async def test_the_retrievers_refuse_it(index, knn_gate, query):
    for retriever in (GatedRetriever(knn_gate, index.as_retriever()), GatePassagesRetriever(index.as_retriever())):
        with pytest.raises(InvalidQuestionError, match="the query is empty"):
            retriever.retrieve(QueryBundle(query))
        with pytest.raises(InvalidQuestionError, match="the query is empty"):
            await retriever.aretrieve(query)


async def test_the_chat_engines_and_the_workflow_refuse_it(engine, index, knn_gate, llm):
    chats = (AdaptiveChatEngine.from_defaults(engine), AdaptiveContextChatEngine.from_index(index, knn_gate, llm=llm))
    for chat in chats:
        with pytest.raises(InvalidQuestionError, match="the query is empty"):
            chat.chat("")
        with pytest.raises(InvalidQuestionError, match="the query is empty"):
            await chat.achat(" ")
    with pytest.raises(InvalidQuestionError, match="the query is empty"):
        await AdaptiveRAGWorkflow(knn_gate, index, llm=llm).run(query="")


def test_the_reranker_refuses_it():
    nodes = [NodeWithScore(node=TextNode(text="Hamlet is a tragedy by Shakespeare."), score=1.0)]
    with pytest.raises(InvalidQuestionError, match="needs the query's text"):
        SeaKRRerank(top_n=1).postprocess_nodes(nodes, query_str=" ")


#: A conversation so far: with it, a chat engine condenses the message with the LLM.
HISTORY = [
    ChatMessage(role=MessageRole.USER, content="Who wrote Hamlet?"),
    ChatMessage(role=MessageRole.ASSISTANT, content="William Shakespeare wrote Hamlet."),
]


def _chats_with_history(engine, index, knn_gate, llm) -> tuple:
    return (
        AdaptiveChatEngine.from_defaults(engine, chat_history=list(HISTORY)),
        AdaptiveContextChatEngine.from_index(index, knn_gate, llm=llm, chat_history=list(HISTORY)),
    )


async def _refused(chat, message, match: str) -> None:
    """Every way of asking ``chat`` refuses ``message``, and its memory is left as it was."""
    before = chat.chat_history
    for ask in (chat.chat, chat.stream_chat):
        with pytest.raises(InvalidQuestionError, match=match):
            ask(message)
    for ask in (chat.achat, chat.astream_chat):
        with pytest.raises(InvalidQuestionError, match=match):
            await ask(message)
    assert chat.chat_history == before


@pytest.mark.parametrize("message", EMPTY)
async def test_the_chat_engines_refuse_it_once_the_chat_has_history(engine, index, knn_gate, brief_llm, message):
    """The condensed question of an empty message is the LLM's invention: the message
    itself is checked, with history as without."""
    for chat in _chats_with_history(engine, index, knn_gate, brief_llm):
        assert chat.chat_history == HISTORY
        await _refused(chat, message, "the query is empty")


@pytest.mark.parametrize("message", [None, 42])
async def test_the_chat_engines_refuse_a_message_that_is_no_text(engine, index, knn_gate, brief_llm, message):
    """``chat(None)`` is refused as an empty message is (``InvalidQuestionError``, a
    ``ValueError``), with history and without."""
    fresh = (
        AdaptiveChatEngine.from_defaults(engine),
        AdaptiveContextChatEngine.from_index(index, knn_gate, llm=brief_llm),
    )
    for chat in (*fresh, *_chats_with_history(engine, index, knn_gate, brief_llm)):
        await _refused(chat, message, f"the message must be a str, got {type(message).__name__}")
