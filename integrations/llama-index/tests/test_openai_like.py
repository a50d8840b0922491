"""LlamaIndex's ``OpenAILike`` behind the core's gates, against a real OpenAI-compatible
server (the embedded SmolLM2 behind the core suite's ``openai_server``): its log-probs
reach the gate, and a server that hangs or is gone costs a batch one request."""

import asyncio
import socket

import pytest
from adaptive_gates import BackendUnavailableError, VerbalizedGate
from llama_index.llms.adaptive_gates import LlamaIndexChatModel
from llama_index.llms.openai_like import OpenAILike
from openai_server import Fault  # the core suite's test server

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
QUESTIONS = ["Who wrote Hamlet?", "What is 2 + 2?", "Name a primary colour.", "Who painted the Mona Lisa?"]


def openai_like(api_base: str, model: str, timeout: float) -> OpenAILike:
    return OpenAILike(model=model, api_base=api_base, api_key="x", is_chat_model=True, timeout=timeout, max_retries=0)


def test_replies_carry_the_servers_logprobs(openai_server):
    adapted = LlamaIndexChatModel(openai_like(openai_server.base_url, openai_server.model_id, timeout=120))
    assert adapted.model_id == openai_server.model_id
    reply = adapted.chat(FRANCE, max_tokens=4, top_logprobs=5)
    direct = openai_server.chat_model.chat(FRANCE, max_tokens=4, top_logprobs=5)
    assert (reply.text, reply.tokens) == (direct.text, direct.tokens)
    assert len(reply.tokens) == 4 and all(len(t.top) == 5 and t.top[0] == (t.token, t.logprob) for t in reply.tokens)
    assert adapted.chat(FRANCE, max_tokens=4).tokens is None  # none asked for, none read
    assert openai_server.requests == 2


@pytest.mark.parametrize("path", ["decide_batch", "adecide_batch"])
def test_a_hung_server_is_asked_once_per_batch(openai_server, path):
    openai_server.set_fault(Fault.HANG)
    chat = LlamaIndexChatModel(openai_like(openai_server.base_url, openai_server.model_id, timeout=1.5))
    gate = VerbalizedGate(chat, deadline=120.0)  # the client's timeout ends each request, not the deadline
    decide = getattr(gate, path)
    decisions = asyncio.run(decide(QUESTIONS)) if path.startswith("a") else decide(QUESTIONS)
    assert openai_server.requests == 1
    assert all(d.is_fallback and d.retrieve for d in decisions)
    # openai.APITimeoutError, which is no TimeoutError
    assert "BackendUnavailableError" in decisions[0].error and "APITimeoutError" in decisions[0].error
    assert all("not asked after an earlier request found it unavailable" in d.error for d in decisions[1:])


def test_a_closed_port_is_unavailable_on_both_paths():
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    chat = LlamaIndexChatModel(openai_like(f"http://127.0.0.1:{port}/v1", "m", timeout=5))
    with pytest.raises(BackendUnavailableError, match="m failed: APIConnectionError: Connection error"):
        chat.chat(FRANCE)
    with pytest.raises(BackendUnavailableError, match="m failed: APIConnectionError: Connection error"):
        asyncio.run(chat.achat(FRANCE))
