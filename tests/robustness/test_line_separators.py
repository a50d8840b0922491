"""A question holding U+0085, U+2028 or U+2029 (which ``str.splitlines`` breaks a line at
and ``json.dumps`` leaves raw) costs nothing: every JSON lines file the package writes
keeps one record a line for any reader, and reads back whole: a gate's feedback log
beside the saved gate (taught directly, through a budget, through the server), outcome
records collected and resumed, and the decisions ``eval`` writes."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from adaptive_gates import BudgetedGate, QARecord, SKRKnnGate, load_gate, load_outcomes
from adaptive_gates.answering.answerer import LLMAnswerer
from adaptive_gates.answering.collection import collect_outcomes
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.cli import main
from adaptive_gates.gates.base.feedback import FEEDBACK_FILE
from adaptive_gates.persistence.json_lines import LINE_BREAKS_LEFT_RAW
from adaptive_gates.records.data import CorpusRecord, write_jsonl
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.serve import build_service

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _one_record_a_line(path, records: int) -> None:
    """The file holds ``records`` lines for ``str.splitlines`` as for a split on newlines."""
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) == len(text.rstrip("\n").split("\n")) == records
    assert not any(c in text for c in LINE_BREAKS_LEFT_RAW)


@pytest.fixture(scope="module")
def knn_dir(cached_embedder, tmp_path_factory):
    gate = SKRKnnGate(cached_embedder, k=10).fit_outcomes(adarague_outcomes("nq")[:200])
    return gate.save(tmp_path_factory.mktemp("knn") / "gate")


@pytest.mark.parametrize("breaker", LINE_BREAKS_LEFT_RAW)
def test_a_budgeted_gate_taught_a_question_with_a_line_separator_loads_again(
    knn_dir, cached_embedder, tmp_path, breaker
) -> None:
    budget = BudgetedGate(load_gate(knn_dir, embedder=cached_embedder), target_rate=0.3)
    questions = [
        f"who wrote{breaker}the play hamlet",
        f"how tall is{breaker}{breaker}mount everest",
        "who painted the mona lisa",
    ]
    for question in questions:
        budget.record_feedback(question, retrieved=False, correct=False)
    saved = budget.save(tmp_path / "budget")
    (log,) = saved.rglob(FEEDBACK_FILE)
    _one_record_a_line(log, 3)
    loaded = load_gate(saved, embedder=cached_embedder)
    assert [e.question for e in loaded.gate.feedback_.entries()] == questions
    assert loaded.score(questions).tolist() == budget.score(questions).tolist()


def test_one_chat_and_one_verdict_leave_a_server_that_starts_again(
    served_gate_dir, served_corpus, served_chat_model, tmp_path
) -> None:
    gate_dir = shutil.copytree(served_gate_dir, tmp_path / "gate")
    retriever = BM25Retriever.from_jsonl(served_corpus)

    def served():
        return build_service(gate=gate_dir, chat=served_chat_model, retriever=retriever, k=1, max_tokens=4)

    question = "Who wrote the novel\u2028Dracula?"
    service = served()
    answer = asyncio.run(service.answer([{"role": "user", "content": question}], {}))
    asyncio.run(service.feedback(answer.decision_id, correct=False))
    _one_record_a_line(gate_dir / FEEDBACK_FILE, 1)
    again = served()  # the saved gate loads: the server starts
    assert again.gate.feedback_.entries()[-1].question == question


def test_collected_outcomes_with_line_separators_resume_and_load(tmp_path) -> None:
    corpus = [
        CorpusRecord("c1", "Paris", "Paris is the capital\u2028and largest city of France."),
        CorpusRecord("c2", "Hamlet", "Hamlet is a tragedy\u2029written by William Shakespeare."),
    ]
    qa = [
        QARecord("q1", "What is the capital\u2028of France?", ["Paris\u0085"]),
        QARecord("q2", "Who wrote\u2029Hamlet?", ["Shakespeare"]),
        QARecord("q3", "Who wrote\u0085Hamlet?", ["Shakespeare"]),
    ]
    answerer, retriever = LLMAnswerer(max_new_tokens=4, batch_size=3), BM25Retriever.from_records(corpus)
    out = tmp_path / "outcomes.jsonl"
    collect_outcomes(qa[:2], answerer, retriever, out, k=1, batch_size=2, progress=False)
    _one_record_a_line(out, 2)
    resumed = collect_outcomes(qa, answerer, retriever, out, k=1, batch_size=2, progress=False)
    _one_record_a_line(out, 3)
    assert [r.question for r in resumed] == [r.question for r in load_outcomes(out)] == [r.question for r in qa]


def test_the_decisions_eval_writes_keep_one_question_a_line(tmp_path) -> None:
    records = adarague_outcomes("nq")[:60]
    rows = [r.to_json() | {"question": f"{r.question}{LINE_BREAKS_LEFT_RAW[i % 3]}"} for i, r in enumerate(records)]
    write_jsonl(tmp_path / "train.jsonl", rows)
    decisions = tmp_path / "d.jsonl"
    argv = ["eval", "--gate", "popularity", "--train", str(tmp_path / "train.jsonl"), "--folds", "2"]
    assert main([*argv, "--decisions", str(decisions), "--json", str(tmp_path / "r.json")]) == 0
    _one_record_a_line(tmp_path / "train.jsonl", len(rows))
    _one_record_a_line(decisions, len(rows))
    assert [json.loads(line)["question"] for line in decisions.read_text().split("\n")[:-1]] == [
        row["question"] for row in rows
    ]
