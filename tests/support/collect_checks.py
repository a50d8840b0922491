"""What collecting outcome records through a framework's chat model must give, shared by
the LangChain and LlamaIndex suites: ``LLMAnswerer`` over the adapted model answers three
real-world questions both ways, with log-probs and token counts."""

from __future__ import annotations

from pathlib import Path

from adaptive_gates import QARecord, load_outcomes
from adaptive_gates.answering.answerer import LLMAnswerer, clean_answer
from adaptive_gates.answering.collection import collect_outcomes, outcome_usage
from adaptive_gates.models import ChatModel
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.retrieval import BM25Retriever

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


def check_collects_outcomes_with_logprobs_and_usage(adapted: ChatModel, core: ChatModel, tmp_path: Path) -> None:
    """``adapted`` (a framework's model over the embedded SmolLM2, whose core chat model
    is ``core``) collects the same answers as ``core``, each no-retrieval answer with
    its tokens' log-probs (two alternatives asked) and every answer with its usage."""
    answerer = LLMAnswerer(adapted, max_new_tokens=12, max_workers=2)
    out = tmp_path / "outcomes.jsonl"
    records = collect_outcomes(
        QA, answerer, BM25Retriever.from_records(CORPUS), out, k=1, batch_size=2, top_logprobs=2, progress=False
    )

    assert load_outcomes(out) == records and [r.id for r in records] == ["q1", "q2", "q3"]
    # The same answers as the core's own chat model asked one question at a time.
    direct = LLMAnswerer(core, max_new_tokens=12, batch_size=1)
    assert [r.pred_no_retrieval for r in records] == direct.answer_batch([q.question for q in QA])
    assert "fleming" in records[2].pred_one_retrieval.lower()  # the passage named him
    for record in records:
        tokens = record.logprobs_no_retrieval
        assert tokens and all(t.logprob <= 0 and 1 <= len(t.top) <= 2 for t in tokens)
        # The tokens kept spell the answer (cut at its first line), then what ended it.
        assert clean_answer("".join(t.token for t in tokens)).startswith(record.pred_no_retrieval)
        usage = record.extra["usage"]
        # The framework's usage came through: every generated token counted, those after the cut too.
        assert usage["no_retrieval"]["completion_tokens"] >= len(tokens)
        assert usage["one_retrieval"]["prompt_tokens"] > usage["no_retrieval"]["prompt_tokens"] > 0
    total = outcome_usage(records)
    assert total.prompt_tokens == sum(u["prompt_tokens"] for r in records for u in r.extra["usage"].values())
    assert total.completion_tokens == sum(u["completion_tokens"] for r in records for u in r.extra["usage"].values())
