"""LangChain's own wrappers of a chat model (``bind``, ``with_retry``,
``with_fallbacks``, ``configurable_*``) behind a core gate: the embedded SmolLM2 and a
``ChatOpenAI`` of the suite's OpenAI-compatible server, which is stopped to show that a
model that is down is still recognised as unavailable through the wrapper."""

import asyncio
import math

import pytest
from langchain_core.runnables import ConfigurableField
from langchain_openai import ChatOpenAI

from adaptive_gates import BackendUnavailableError, SKRPromptGate
from langchain_adaptive_gates import LangChainChatModel
from support.openai_server import ChatCompletionsServer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
QUESTIONS = ["Who wrote Hamlet?", "Is Paris in France?"]


def chat_openai(base_url: str, model: str = "m") -> ChatOpenAI:
    return ChatOpenAI(base_url=base_url, api_key="x", model=model, timeout=30, max_retries=0)


@pytest.fixture
def stopped_server(served_chat_model):
    """A server that answered once, then was stopped: its model id and base URL."""
    server = ChatCompletionsServer(served_chat_model).start()
    assert LangChainChatModel(chat_openai(server.base_url, server.model_id)).chat(FRANCE, max_tokens=2).text
    server.close()
    return server


def test_a_bound_stop_is_kept_and_the_models_name_is_the_id(chat_llm):
    adapted = LangChainChatModel(chat_llm.bind(stop=[" "]))
    reply = adapted.chat(FRANCE, max_tokens=8)
    assert reply.text == chat_llm.invoke("What is the capital of France?", stop=[" "], max_tokens=8).text
    assert " " not in reply.text.strip()
    assert adapted.model_id == chat_llm.model_name


def test_configurable_wrappers_answer_as_their_default_model(chat_llm):
    bare = LangChainChatModel(chat_llm).chat(FRANCE, max_tokens=4)
    fields = chat_llm.configurable_fields(temperature=ConfigurableField(id="temperature"))
    alternatives = chat_llm.configurable_alternatives(
        ConfigurableField(id="llm"), default_key="local", remote=chat_openai("http://127.0.0.1:9/v1")
    )
    for wrapped in (fields, alternatives):
        adapted = LangChainChatModel(wrapped)
        assert adapted.chat(FRANCE, max_tokens=4).text == bare.text
        assert adapted.model_id == chat_llm.model_name


def test_a_fallback_model_answers_when_the_first_is_down(chat_llm, stopped_server):
    adapted = LangChainChatModel(chat_openai(stopped_server.base_url).with_fallbacks([chat_llm]))
    assert adapted.chat(FRANCE, max_tokens=4).text == LangChainChatModel(chat_llm).chat(FRANCE, max_tokens=4).text
    assert adapted.model_id == "m"  # the first model's


@pytest.mark.parametrize("path", ["decide_batch", "adecide_batch"])
def test_a_down_server_behind_with_retry_gives_the_gates_fallback(stopped_server, path):
    llm = chat_openai(stopped_server.base_url).with_retry(stop_after_attempt=2, wait_exponential_jitter=False)
    gate = SKRPromptGate(LangChainChatModel(llm))
    decide = getattr(gate, path)
    decisions = asyncio.run(decide(QUESTIONS)) if path.startswith("a") else decide(QUESTIONS)
    assert all(d.is_fallback and d.retrieve and math.isnan(d.score) for d in decisions)
    assert "BackendUnavailableError: m failed: OpenAIConnectionError" in decisions[0].error
    assert "not asked after an earlier request found it unavailable" in decisions[1].error


def test_every_fallback_down_is_unavailable_on_both_paths(stopped_server):
    down = chat_openai(stopped_server.base_url)
    adapted = LangChainChatModel(down.with_fallbacks([down.bind(stop=["."])]))
    with pytest.raises(BackendUnavailableError, match="m failed: OpenAIConnectionError"):
        adapted.chat(FRANCE)
    with pytest.raises(BackendUnavailableError, match="m failed: OpenAIConnectionError"):
        asyncio.run(adapted.achat(FRANCE))
