"""langchain-openai's ``ChatOpenAI`` behind the core's gates, against a real
OpenAI-compatible server (the embedded SmolLM2 behind the core suite's ``openai_server``):
its log-probs reach the gate, and a server that hangs or is gone costs a batch one request."""

import pytest
from langchain_openai import ChatOpenAI

from langchain_adaptive_gates import LangChainChatModel
from support.openai_server import (  # the core suite's test server and its checks
    check_a_closed_port_is_unavailable,
    check_a_hung_server_is_asked_once_per_batch,
    check_replies_carry_the_servers_logprobs,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def adapted_chat_openai(base_url: str, model: str = "m", timeout: float = 5) -> LangChainChatModel:
    return LangChainChatModel(ChatOpenAI(base_url=base_url, api_key="x", model=model, timeout=timeout, max_retries=0))


def test_replies_carry_the_servers_logprobs(openai_server):
    adapted = adapted_chat_openai(openai_server.base_url, openai_server.model_id, timeout=120)
    reply = check_replies_carry_the_servers_logprobs(adapted, openai_server)
    assert reply.finish_reason == "length"  # the OpenAI name of the finish


@pytest.mark.parametrize("path", ["decide_batch", "adecide_batch"])
def test_a_hung_server_is_asked_once_per_batch(openai_server, path):
    adapted = adapted_chat_openai(openai_server.base_url, openai_server.model_id, timeout=1.5)
    # langchain-openai's OpenAITimeoutError: an openai.APITimeoutError, which is no TimeoutError
    check_a_hung_server_is_asked_once_per_batch(adapted, openai_server, path, "OpenAITimeoutError")


def test_a_closed_port_is_unavailable_on_both_paths():
    check_a_closed_port_is_unavailable(adapted_chat_openai, "OpenAIConnectionError")
