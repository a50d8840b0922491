"""The log-prob gate as the selector of a real ``RouterQueryEngine``, over the embedded
SmolLM2 as a LlamaIndex LLM and a real index: a confident answer goes direct with its
draft in the decision, an unsure one retrieves, and an LLM asked for no
log-probabilities is an error, not a silent fallback."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.indices import EmptyIndex
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.tools import QueryEngineTool
from llama_index.llms.adaptive_gates import LlamaIndexChatModel
from llama_index.selectors.adaptive_gates import GateSelector, decision_of

from adaptive_gates import LogprobGate, LogprobsUnavailableError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONFIDENT = "What is the capital of Japan?"
UNSURE = "Who won the 1937 Tasmanian chess championship?"
#: The gate's draft cap: eight tokens hold the confident answer ("The capital of Japan is Tokyo.").
DRAFT_TOKENS = 8


def router(gate, index, llm) -> RouterQueryEngine:
    tools = [
        QueryEngineTool.from_defaults(EmptyIndex().as_query_engine(llm=llm), name="llm", description="The LLM alone."),
        QueryEngineTool.from_defaults(
            index.as_query_engine(llm=llm, similarity_top_k=2), name="wiki", description="Wikipedia paragraphs."
        ),
    ]
    return RouterQueryEngine(selector=GateSelector(gate), query_engine_tools=tools, llm=llm)


def test_the_router_answers_confident_questions_directly_and_retrieves_for_unsure_ones(index, llm):
    engine = router(LogprobGate(LlamaIndexChatModel(llm), max_tokens=DRAFT_TOKENS), index, llm)
    confident = engine.query(CONFIDENT)
    decision = decision_of(confident)
    assert confident.metadata["selector_result"].ind == 0 and not confident.source_nodes
    assert decision.gate == "logprob" and not decision.retrieve and "Tokyo" in decision.draft_answer
    assert set(decision.details["signals"]) == {"max-entropy", "mean-entropy", "perplexity", "min-prob"}
    unsure = asyncio.run(engine.aquery(UNSURE))
    assert unsure.metadata["selector_result"].ind == 1 and unsure.source_nodes
    assert decision_of(unsure).retrieve and decision_of(unsure).score > decision.score


def test_an_llm_asked_for_no_logprobs_fails_the_query(index, llm):
    engine = router(LogprobGate(LlamaIndexChatModel(llm, request_logprobs=False), max_tokens=DRAFT_TOKENS), index, llm)
    with pytest.raises(LogprobsUnavailableError, match="returned no token log-probabilities"):
        engine.query(CONFIDENT)
    with pytest.raises(LogprobsUnavailableError):
        asyncio.run(engine.aquery(CONFIDENT))
