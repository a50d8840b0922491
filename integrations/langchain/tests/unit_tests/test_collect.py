"""Collecting outcome records with a LangChain chat model: ``LLMAnswerer`` over
``LangChainChatModel`` (here wrapping the embedded SmolLM2 as a real LangChain chat
model) answers each question both ways, with log-probs and token counts."""

from adaptive_gates import QARecord, load_outcomes
from adaptive_gates.answering import LLMAnswerer
from adaptive_gates.collection import collect_outcomes, outcome_usage
from adaptive_gates.data import CorpusRecord
from adaptive_gates.retrieval import BM25Retriever

from langchain_adaptive_gates import AdaptiveGatesChatModel, LangChainChatModel

CORPUS = [
    CorpusRecord("c1", "Paris", "Paris is the capital and largest city of France."),
    CorpusRecord("c2", "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
    CorpusRecord("c3", "Penicillin", "Penicillin was discovered in 1928 by Alexander Fleming."),
]
QA = [
    QARecord("q1", "What is the capital of France?", ["Paris"]),
    QARecord("q2", "Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"]),
    QARecord("q3", "Who discovered penicillin?", ["Alexander Fleming", "Fleming"]),
]


def test_a_langchain_chat_model_collects_outcomes_with_logprobs_and_usage(tmp_path):
    llm = AdaptiveGatesChatModel()
    answerer = LLMAnswerer(LangChainChatModel(llm), max_new_tokens=12, max_workers=2)
    out = tmp_path / "outcomes.jsonl"
    records = collect_outcomes(QA, answerer, BM25Retriever.from_records(CORPUS), out, k=1,
                               batch_size=2, top_logprobs=2, progress=False)

    assert load_outcomes(out) == records and [r.id for r in records] == ["q1", "q2", "q3"]
    # The same answers as the core's own chat model asked one question at a time.
    core = LLMAnswerer(llm.backend, max_new_tokens=12, batch_size=1)
    assert [r.pred_no_retrieval for r in records] == core.answer_batch([q.question for q in QA])
    assert "fleming" in records[2].pred_one_retrieval.lower()  # the passage named him
    for record in records:
        tokens = record.logprobs_no_retrieval
        assert tokens and all(len(t.top) == 2 and t.logprob <= 0 for t in tokens)
        usage = record.extra["usage"]
        # LangChain's usage_metadata came through: every generated token counted.
        assert usage["no_retrieval"]["completion_tokens"] == len(tokens)
        assert usage["one_retrieval"]["prompt_tokens"] > usage["no_retrieval"]["prompt_tokens"] > 0
    total = outcome_usage(records)
    assert total.completion_tokens == sum(u["completion_tokens"] for r in records for u in r.extra["usage"].values())
