"""Collecting outcome records with a LangChain chat model: ``LLMAnswerer`` over
``LangChainChatModel`` (here wrapping the embedded SmolLM2 as a real LangChain chat
model) answers each question both ways, with log-probs and token counts."""

from langchain_adaptive_gates import AdaptiveGatesChatModel, LangChainChatModel
from support.collect_checks import check_collects_outcomes_with_logprobs_and_usage  # the core suite's


def test_a_langchain_chat_model_collects_outcomes_with_logprobs_and_usage(tmp_path):
    llm = AdaptiveGatesChatModel()
    check_collects_outcomes_with_logprobs_and_usage(LangChainChatModel(llm), llm.backend, tmp_path)
