"""The log-prob gate inside a real LangChain router, over the embedded SmolLM2 as a
LangChain chat model: a confident answer is returned with no second LLM call, an
unsure one goes to retrieval, and a model without log-probabilities is an error."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda

from adaptive_gates import LogprobGate, LogprobsUnavailableError
from langchain_adaptive_gates import AdaptiveGatesChatModel, LangChainChatModel, gated_router

CONFIDENT = "What is the capital of Japan?"
UNSURE = "Who won the 1937 Tasmanian chess championship?"


class _ChatCalls(BaseCallbackHandler):
    """Counts the chat model's runs."""

    def __init__(self) -> None:
        self.calls = 0

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.calls += 1


@pytest.fixture
def counted():
    calls = _ChatCalls()
    return AdaptiveGatesChatModel(max_tokens=24, callbacks=[calls]), calls


def test_a_confident_draft_is_the_answer_with_no_second_llm_call(counted):
    llm, calls = counted
    router = gated_router(LogprobGate(LangChainChatModel(llm)), direct=llm, retrieval=RunnableLambda(lambda q: "rag"))
    assert "Tokyo" in router.invoke(CONFIDENT)
    assert calls.calls == 1  # the gate's own answer; the direct branch was not asked
    assert asyncio.run(router.ainvoke(UNSURE)) == "rag"
    assert calls.calls == 2


def test_a_model_without_logprobs_fails_the_chain_clearly(counted):
    llm, calls = counted
    gate = LogprobGate(LangChainChatModel(llm, request_logprobs=False))
    router = gated_router(gate, direct=llm, retrieval=RunnableLambda(lambda q: "rag"))
    with pytest.raises(LogprobsUnavailableError, match="returned no token log-probabilities"):
        router.invoke(CONFIDENT)
    with pytest.raises(LogprobsUnavailableError):
        asyncio.run(gate.adecide_batch([CONFIDENT, UNSURE]))
    assert calls.calls == 3  # asked once per question: no fallback answered instead
