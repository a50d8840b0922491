"""LlamaIndex's ``OpenAILike`` behind the core's gates, against a real OpenAI-compatible
server (the embedded SmolLM2 behind the core suite's ``openai_server``): its log-probs
reach the gate, and a server that hangs or is gone costs a batch one request."""

import pytest
from llama_index.llms.adaptive_gates import LlamaIndexChatModel
from llama_index.llms.openai_like import OpenAILike

from support.openai_server import (  # the core suite's test server and its checks
    check_a_closed_port_is_unavailable,
    check_a_hung_server_is_asked_once_per_batch,
    check_replies_carry_the_servers_logprobs,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def adapted_openai_like(api_base: str, model: str = "m", timeout: float = 5) -> LlamaIndexChatModel:
    return LlamaIndexChatModel(
        OpenAILike(model=model, api_base=api_base, api_key="x", is_chat_model=True, timeout=timeout, max_retries=0)
    )


def test_replies_carry_the_servers_logprobs(openai_server):
    adapted = adapted_openai_like(openai_server.base_url, openai_server.model_id, timeout=120)
    assert adapted.model_id == openai_server.model_id
    check_replies_carry_the_servers_logprobs(adapted, openai_server)


@pytest.mark.parametrize("path", ["decide_batch", "adecide_batch"])
def test_a_hung_server_is_asked_once_per_batch(openai_server, path):
    adapted = adapted_openai_like(openai_server.base_url, openai_server.model_id, timeout=1.5)
    # openai.APITimeoutError, which is no TimeoutError
    check_a_hung_server_is_asked_once_per_batch(adapted, openai_server, path, "APITimeoutError")


def test_a_closed_port_is_unavailable_on_both_paths():
    check_a_closed_port_is_unavailable(adapted_openai_like, "APIConnectionError")
