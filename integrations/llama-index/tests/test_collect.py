"""Collecting outcome records with a LlamaIndex LLM: ``LLMAnswerer`` over
``LlamaIndexChatModel(AdaptiveGatesLLM())`` (the embedded SmolLM2 as a real LlamaIndex
LLM) answers each question both ways, with log-probs and token counts."""

from llama_index.llms.adaptive_gates import AdaptiveGatesLLM, LlamaIndexChatModel

from support.collect_checks import check_collects_outcomes_with_logprobs_and_usage  # the core suite's


def test_a_llama_index_llm_collects_outcomes_with_logprobs_and_usage(tmp_path):
    llm = AdaptiveGatesLLM()
    check_collects_outcomes_with_logprobs_and_usage(LlamaIndexChatModel(llm), llm.backend, tmp_path)
