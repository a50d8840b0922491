"""The condense-plus-context chat engine with a gate, over a real VectorStoreIndex and
the embedded LLM.

The kNN gate is deterministic on its own memory, so first messages (which need no
condensing) drive each route on purpose; the retrieve route must answer exactly as
llama-index-core's own ``CondensePlusContextChatEngine`` does, and the direct route as
the LLM answers the conversation alone. A follow-up is condensed by the real model,
and the gate must have judged whatever it wrote.
"""

from __future__ import annotations

import functools

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.chat_engine.condense_plus_context import DEFAULT_CONDENSE_PROMPT_TEMPLATE
from llama_index.core.instrumentation.events.llm import (
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.events.retrieval import RetrievalStartEvent
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
from llama_index.query_engine.adaptive_gates import (
    METADATA_KEY,
    QUESTION_KEY,
    ROUTE_KEY,
    AdaptiveContextChatEngine,
    GatedStreamingChatResponse,
)
from llama_index.query_engine.adaptive_gates.standalone import implausible
from llama_index.selectors.adaptive_gates import GateDecisionEvent, decision_of

from adaptive_gates import VerbalizedGate
from adaptive_gates.answering.prompts import quote_question, quote_turns
from adaptive_gates.models.chat.base import ChatReply, with_achat

from .conftest import FORGED_REPLY, KNOWN, UNKNOWN
from .doubles import ScriptedChat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KNOWN_Q = KNOWN[0]  # "Who wrote Hamlet?": answered directly
UNKNOWN_Q = UNKNOWN[0]  # the Tuvalu census question: retrieves


def _chat(index, gate, llm, **kwargs) -> AdaptiveContextChatEngine:
    return AdaptiveContextChatEngine.from_index(index, gate, llm=llm, similarity_top_k=2, **kwargs)


@pytest.fixture(scope="module")
def whole_replies(brief_index, knn_gate, streaming_llm):
    """``whole_replies(question)``: a new chat's reply to it, answered whole by the
    streaming LLM, generated once: the sync and async stream tests compare with it."""
    return functools.cache(lambda question: _chat(brief_index, knn_gate, streaming_llm).chat(question))


def _ids(nodes) -> list[str]:
    return [n.node.node_id for n in nodes]


def _user(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.USER, content=text)


def test_a_known_question_is_answered_without_context_or_retrieval(brief_index, knn_gate, brief_llm, recorder, spans):
    chat = _chat(brief_index, knn_gate, brief_llm)
    reply = chat.chat(KNOWN_Q)
    assert reply.metadata[ROUTE_KEY] == "direct" and reply.metadata[QUESTION_KEY] == KNOWN_Q
    assert reply.metadata[METADATA_KEY]["retrieve"] is False and reply.source_nodes == []
    assert recorder.of(RetrievalStartEvent) == []
    assert reply.response == brief_llm.chat([_user(KNOWN_Q)]).message.content
    (event,) = recorder.of(GateDecisionEvent)
    assert event.decision == reply.metadata[METADATA_KEY] and decision_of(reply).question == KNOWN_Q
    assert event.span_id.startswith("AdaptiveContextChatEngine.chat-")
    assert [(m.role, m.content) for m in chat.chat_history] == [
        (MessageRole.USER, KNOWN_Q),
        (MessageRole.ASSISTANT, reply.response),
    ]


async def test_a_question_that_needs_context_is_answered_as_condense_plus_context_does(
    brief_index, knn_gate, brief_llm
):
    chat = _chat(brief_index, knn_gate, brief_llm)
    reply = await chat.achat(UNKNOWN_Q)
    assert reply.metadata[ROUTE_KEY] == "retrieve" and reply.metadata[METADATA_KEY]["retrieve"] is True
    plain = CondensePlusContextChatEngine.from_defaults(brief_index.as_retriever(similarity_top_k=2), llm=brief_llm)
    expected = plain.chat(UNKNOWN_Q)
    assert reply.response == expected.response
    assert _ids(reply.source_nodes) == _ids(expected.source_nodes) and len(reply.source_nodes) == 2
    assert reply.sources[0].raw_input == {"message": UNKNOWN_Q}


@pytest.mark.parametrize("question,route", [(KNOWN_Q, "direct"), (UNKNOWN_Q, "retrieve")])
def test_stream_chat_streams_token_by_token(brief_index, knn_gate, streaming_llm, whole_replies, question, route):
    streamed = _chat(brief_index, knn_gate, streaming_llm).stream_chat(question)
    assert isinstance(streamed, GatedStreamingChatResponse) and streamed.metadata[ROUTE_KEY] == route
    chunks = list(streamed.response_gen)
    assert len(chunks) > 1, "a multi-token answer came as one chunk"
    whole = whole_replies(question)
    assert "".join(chunks) == whole.response and _ids(streamed.source_nodes) == _ids(whole.source_nodes)
    assert streamed.metadata[METADATA_KEY]["retrieve"] == whole.metadata[METADATA_KEY]["retrieve"]


@pytest.mark.parametrize("question,route", [(KNOWN_Q, "direct"), (UNKNOWN_Q, "retrieve")])
async def test_astream_chat_streams_without_blocking_the_loop(
    brief_index, knn_gate, streaming_llm, whole_replies, loop_ticks, question, route
):
    chat = _chat(brief_index, knn_gate, streaming_llm)
    async with loop_ticks:
        streamed = await chat.astream_chat(question)
        chunks = [t async for t in streamed.async_response_gen()]
    assert loop_ticks.count > 0, "the event loop was blocked while the engine streamed"
    assert streamed.metadata[ROUTE_KEY] == route and len(chunks) > 1
    assert "".join(chunks) == whole_replies(question).response
    assert [(m.role, m.content) for m in chat.chat_history] == [
        (MessageRole.USER, question),
        (MessageRole.ASSISTANT, streamed.response),
    ]


def test_the_gate_judges_the_condensed_follow_up(brief_index, knn_gate, llm, recorder):
    chat = _chat(brief_index, knn_gate, llm)
    first = chat.chat(KNOWN_Q)
    history = list(chat.chat_history)
    follow_up = "When did he die?"
    second = chat.chat(follow_up)
    # Whatever the model wrote, the gate judged it and the engine followed the decision:
    # the one completion is the condensing, as the LLM returned it to the engine.
    (condensing,) = recorder.of(LLMCompletionEndEvent)
    assert condensing.prompt == DEFAULT_CONDENSE_PROMPT_TEMPLATE.format(
        chat_history=quote_turns((m.role.value, m.content or "") for m in history), question=quote_question(follow_up)
    )
    condensed = condensing.response.text.strip()
    if not condensed or implausible(condensed, [follow_up, *(m.content for m in history)]) is not None:
        condensed = follow_up  # what no rewording of the conversation gives way to
    assert second.metadata[QUESTION_KEY] == second.metadata[METADATA_KEY]["question"] == condensed
    assert [e.query for e in recorder.of(GateDecisionEvent)] == [KNOWN_Q, condensed]
    retrieved = second.metadata[METADATA_KEY]["retrieve"]
    assert second.metadata[ROUTE_KEY] == ("retrieve" if retrieved else "direct")
    assert bool(second.source_nodes) == retrieved
    if not retrieved:  # the direct answer sees the conversation
        assert second.response == llm.chat([*history, _user(follow_up)]).message.content
    assert first.response.strip() and second.response.strip() and len(chat.chat_history) == 4


async def test_a_confident_draft_is_the_answer_without_another_llm_call(brief_index, brief_llm, recorder):
    gate = VerbalizedGate(ScriptedChat(ChatReply("Paris, certain.")))
    streamed = _chat(brief_index, gate, brief_llm).stream_chat("What is the capital of France?")
    assert list(streamed.response_gen) == ["Paris"] and streamed.metadata[ROUTE_KEY] == "draft"
    reply = await _chat(brief_index, gate, brief_llm).achat("What is the capital of France?")
    assert reply.response == reply.metadata[METADATA_KEY]["draft_answer"] == "Paris"
    assert reply.metadata[ROUTE_KEY] == "draft" and streamed.source_nodes == reply.source_nodes == []
    assert recorder.of(LLMChatStartEvent) == [] and recorder.of(RetrievalStartEvent) == []


def test_a_system_prompt_leads_direct_answers(brief_index, knn_gate, brief_llm):
    system = "Answer in one short sentence."
    reply = _chat(brief_index, knn_gate, brief_llm, system_prompt=system).chat(KNOWN_Q)
    expected = brief_llm.chat([ChatMessage(role=MessageRole.SYSTEM, content=system), _user(KNOWN_Q)])
    assert reply.metadata[ROUTE_KEY] == "direct" and reply.response == expected.message.content


def test_refuses_what_is_not_a_gate(brief_index, brief_llm):
    with pytest.raises(TypeError, match="gate must be an adaptive_gates Gate"):
        AdaptiveContextChatEngine.from_index(brief_index, "skr-knn", llm=brief_llm)


def test_the_condensing_prompt_holds_each_turn_on_its_own_quoted_line(brief_index, knn_gate, brief_llm, recorder):
    history = [_user(KNOWN_Q), ChatMessage(role=MessageRole.ASSISTANT, content=FORGED_REPLY)]
    _chat(brief_index, knn_gate, brief_llm).chat("When did he die?", chat_history=history)
    prompt = recorder.of(LLMCompletionStartEvent)[0].prompt
    turns = quote_turns([("user", KNOWN_Q), ("assistant", FORGED_REPLY)])
    question = quote_question("When did he die?")
    assert prompt == DEFAULT_CONDENSE_PROMPT_TEMPLATE.format(chat_history=turns, question=question)
    lines = [line.strip() for line in prompt.split("\n")]
    assert [line for line in lines if line.startswith(("user", "assistant"))] == turns.split("\n")
    assert "<|" not in prompt


def test_a_looping_condenser_is_not_judged(brief_index, knn_gate):
    """A condensed question that loops is refused by the sanity rule: the gate judges the
    message itself, and the response says why."""
    looping = AdaptiveGatesLLM(chat_model=with_achat(ScriptedChat(ChatReply("What a great question! What a great"))))
    chat = _chat(brief_index, knn_gate, looping)
    chat.chat(KNOWN_Q)
    second = chat.chat("When did he die?")
    assert decision_of(second).question == second.metadata[QUESTION_KEY] == "When did he die?"
    assert "repeats 'what a great'" in second.metadata["condense_error"]


def test_a_chatty_condenser_is_not_judged(brief_index, knn_gate):
    """A condensed "question" that is a reply's chatter is refused, though a chatty
    earlier reply put its words in the history: the gate judges the message itself."""
    chatty = AdaptiveGatesLLM(chat_model=with_achat(ScriptedChat(ChatReply("What a great question! Let's explore"))))
    chat = _chat(brief_index, knn_gate, chatty)
    chat.chat(KNOWN_Q)
    assert chat.chat_history[-1].content.startswith("What a great question! Let's explore")  # the script's reply
    second = chat.chat("When did he die?")
    assert decision_of(second).question == second.metadata[QUESTION_KEY] == "When did he die?"
    assert "is a reply's chatter ('What a great question')" in second.metadata["condense_error"]
