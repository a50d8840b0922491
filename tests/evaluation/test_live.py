"""Live evaluation: the LLM answers with and without retrieval here and now."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptive_gates.answering.answerer import LLMAnswerer
from adaptive_gates.evaluation.injection import VERBALIZED_VERDICTS, ObeyingChat, TurnFollowingChat
from adaptive_gates.evaluation.live import evaluate_live
from adaptive_gates.gates import BM25DifficultyGate, VerbalizedGate
from adaptive_gates.records.answer_metrics import contains_answer
from adaptive_gates.records.data import load_corpus
from adaptive_gates.retrieval.bm25 import BM25Retriever


@pytest.fixture(scope="module")
def retriever(corpus_path):
    return BM25Retriever.from_records(load_corpus(corpus_path))


def test_a_question_only_gate_with_the_real_model(qa_records, retriever, lm, one_torch_thread):
    gate = BM25DifficultyGate().fit([r.question for r in qa_records[10:60]])
    records = list(qa_records[:3])
    answerer = LLMAnswerer(lm, max_new_tokens=8)
    report = evaluate_live(gate, records, retriever, answerer, k=2, batch_size=2, progress=False)
    assert report["mode"] == "live" and report["k"] == 2 and report["n"] == 3
    assert report["threshold"] == gate.threshold_
    assert report["fallbacks"] == 0
    assert report["llm_answer_calls"] == 3 and report["drafts_reused"] == 0
    assert report["lm_calls"] == 1.0  # a gate that reads only the question: one answer each
    rows = report["questions"]
    for row, record in zip(rows, records):
        assert row["id"] == record.id and len(row["retrieved"]) == 2
        assert row["correct_without"] == contains_answer(row["answer_without"], record.answers)
        assert row["correct_with"] == contains_answer(row["answer_with"], record.answers)
    flags = np.array([r["retrieve"] for r in rows])
    a = np.array([r["correct_without"] for r in rows])
    assert report["alignment"]["uncertain_rate"] == pytest.approx(flags.mean())
    assert report["never"] == pytest.approx(a.mean())
    assert set(report["seconds_per_question"]) == {"gate", "direct_answer", "retrieval", "grounded_answer"}
    json.dumps(report)


def test_an_answer_first_gate_is_not_asked_again(qa_records, retriever):
    records = list(qa_records[:3])
    gate = VerbalizedGate(ObeyingChat(VERBALIZED_VERDICTS))
    answer_chat = TurnFollowingChat(VERBALIZED_VERDICTS)
    report = evaluate_live(gate, records, retriever, LLMAnswerer(answer_chat), k=1, progress=False)
    # the gate's drafts are the answers without retrieval: only the grounded answers are asked for
    assert report["fallbacks"] == 0
    assert report["drafts_reused"] == 3 and report["llm_answer_calls"] == 0
    assert len(answer_chat.calls) == 3
    rows = report["questions"]
    # the scripted model's reply to the gate's prompt, "Springfield. <word>", gives the draft
    assert all(r["answer_without"] == "Springfield" and r["retrieve"] for r in rows)
    assert all(r["llm_calls"] == 1 for r in rows)
    assert report["lm_calls"] == 2.0  # the gate's own call, then the answer over the passages
