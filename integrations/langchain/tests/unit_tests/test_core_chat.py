"""LangChainChatModel's failure paths: what reaches a gate when the chat model cannot
answer, and what is refused before the model is asked."""

import asyncio
import math

import pytest
from langchain_core.exceptions import ModelConnectionError, ModelTimeoutError
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableLambda

from adaptive_gates import BackendError, BackendUnavailableError, SKRPromptGate
from langchain_adaptive_gates import LangChainChatModel

from .chat_doubles import UnreachableChatModel, scripted

QUESTIONS = ["Who wrote Hamlet?", "Who painted the Mona Lisa?", "When did Shakespeare die?"]


def test_an_unreachable_model_is_unavailable_on_both_paths():
    llm = UnreachableChatModel()
    chat = LangChainChatModel(llm, model_id="down")
    messages = [{"role": "user", "content": "Who wrote Hamlet?"}]
    with pytest.raises(BackendUnavailableError, match="down failed: ConnectionError: connection refused"):
        chat.chat(messages)
    with pytest.raises(BackendUnavailableError, match="down failed: ConnectionError: connection refused"):
        asyncio.run(chat.achat(messages))
    assert llm.calls == 2


def test_an_unreachable_model_is_not_asked_the_rest_of_a_batch():
    llm = UnreachableChatModel()
    decisions = SKRPromptGate(LangChainChatModel(llm)).decide_batch(QUESTIONS)
    assert all(d.is_fallback and d.retrieve and math.isnan(d.score) for d in decisions)
    assert "BackendUnavailableError" in decisions[0].error
    assert llm.calls == 1  # one request found it unavailable; the rest of the batch was not sent


@pytest.mark.parametrize("error", [ModelTimeoutError("timed out"), ModelConnectionError("refused")])
def test_langchains_own_timeout_and_connection_errors_mean_unavailable(error):
    llm = UnreachableChatModel(error=error)
    decisions = SKRPromptGate(LangChainChatModel(llm)).decide_batch(QUESTIONS)
    assert (
        f"BackendUnavailableError: langchain:UnreachableChatModel failed: {type(error).__name__}" in decisions[0].error
    )
    assert llm.calls == 1


def test_malformed_messages_are_the_callers_mistake():
    chat = LangChainChatModel(scripted("42"))
    with pytest.raises(ValueError, match="role must be one of"):
        chat.chat([{"role": "tool", "content": "42"}])
    with pytest.raises(ValueError, match="stop strings"):
        chat.chat([{"role": "user", "content": "Hi"}], stop=[""])
    assert chat.chat([{"role": "user", "content": "Hi"}]).text == "42"  # nothing was asked before


def test_a_runnable_not_returning_a_message_is_refused():
    with pytest.raises(TypeError, match="must return a message, and RunnableSequence returns <class 'str'>"):
        LangChainChatModel(scripted("42") | StrOutputParser())
    with pytest.raises(TypeError, match="a LangChain chat model or a runnable wrapping one, got str"):
        LangChainChatModel("gpt-4o")


def test_a_reply_that_is_not_a_message_is_a_backend_error():
    chat = LangChainChatModel(RunnableLambda(lambda messages: str(messages[-1].content)), pass_options=False)
    with pytest.raises(BackendError, match="replied with a str, not a message"):
        chat.chat([{"role": "user", "content": "Hi"}])
