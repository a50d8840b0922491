"""Running a SeaKR pipeline over a QA set: scores, checkpoint and report."""

from __future__ import annotations

import json

import pytest

from adaptive_gates.errors import NotFittedError
from adaptive_gates.records.data import QARecord, load_corpus
from adaptive_gates.retrieval.bm25 import BM25Retriever
from adaptive_gates.seakr.reasoning_prompt import DEFAULT_DEMOS
from adaptive_gates.seakr.runner import run_pipeline, summarize

FAST = {"demos": DEFAULT_DEMOS[:1], "answer_tokens": 8, "step_tokens": 8, "prefix_cache": 0}


@pytest.fixture(scope="module")
def retriever(corpus_path):
    return BM25Retriever.from_records(load_corpus(corpus_path))


@pytest.fixture(scope="module")
def records(qa_records):
    return list(qa_records[:2])


def test_summarize_averages_the_rows():
    rows = [
        {"em": 1.0, "f1": 1.0, "retrieval_calls": 1, "error": None, "seconds": 2.0},
        {"em": 0.0, "f1": 0.5, "retrieval_calls": 0, "error": "boom", "seconds": 1.0},
    ]
    assert summarize(rows) == {
        "n": 2,
        "em": 0.5,
        "f1": 0.75,
        "retrieval_calls": 1,
        "retrieval_calls_per_question": 0.5,
        "errors": 1,
        "seconds_per_question": 1.5,
    }
    with pytest.raises(ValueError, match=r"no rows"):
        summarize([])


def test_a_run_scores_every_question_and_resumes_from_its_checkpoint(
    records, retriever, lm, tmp_path, one_torch_thread
):
    checkpoint = tmp_path / "run" / "rows.jsonl"
    report = run_pipeline(
        records,
        retriever,
        lm=lm,
        mode="single-retrieval",
        n_candidates=1,
        checkpoint=checkpoint,
        progress=False,
        **FAST,
    )
    assert report["n"] == 2 and report["mode"] == "single-retrieval" and report["model"] == lm.model_id
    assert report["retrieval_calls"] == 2 and report["errors"] == 0
    assert report["settings"]["n_candidates"] == 1 and report["settings"]["demos"] == 1
    assert report["calibration"] is None
    for row, record in zip(report["results"], records):
        assert row["id"] == record.id and row["answers"] == list(record.answers)
        assert 0 <= row["em"] <= row["f1"] <= 1
        assert len(row["trace"]["documents"]) == 1
    json.dumps(report)
    lines = checkpoint.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [r.id for r in records]
    # rows already in the checkpoint are reused: a marked row comes back as it is
    marked = json.loads(lines[0]) | {"prediction": "from the checkpoint"}
    checkpoint.write_text(json.dumps(marked) + "\n" + lines[1] + '\n{"id": "torn')
    again = run_pipeline(
        records,
        retriever,
        lm=lm,
        mode="single-retrieval",
        n_candidates=1,
        checkpoint=checkpoint,
        progress=False,
        **FAST,
    )
    assert again["results"][0]["prediction"] == "from the checkpoint"
    assert again["results"][1] == report["results"][1]


def test_a_failing_question_gets_its_error_and_the_run_goes_on(records, retriever, lm, one_torch_thread):
    bad = QARecord("bad", "   ", ["x"])
    report = run_pipeline([bad, records[0]], retriever, lm=lm, mode="no-retrieval", progress=False, **FAST)
    assert report["errors"] == 1 and report["retrieval_calls"] == 0
    failed = report["results"][0]
    assert failed["error"].startswith("InvalidQuestionError") and failed["prediction"] == "" and failed["trace"] is None
    assert report["results"][1]["error"] is None


def test_usage_errors_come_before_any_work(records, retriever, lm):
    with pytest.raises(ValueError, match=r"no QA records"):
        run_pipeline([], retriever, lm=lm)
    with pytest.raises(NotFittedError, match=r"has no δ"):
        run_pipeline(records, retriever, lm=lm, progress=False)
    with pytest.raises(ValueError, match=r"go together"):
        run_pipeline(records, retriever, lm=lm, target_rate=0.5, progress=False)
    with pytest.raises(ValueError, match=r"not both"):
        run_pipeline(records, retriever, lm=lm, threshold=1.0, target_rate=0.5, calibration_questions=["q?"])
    with pytest.raises(ValueError, match=r"target_rate must be a number"):
        run_pipeline(records, retriever, lm=lm, target_rate=True, calibration_questions=["q?"])
    with pytest.raises(ValueError, match=r"calibration_questions must be a non-empty"):
        run_pipeline(records, retriever, lm=lm, target_rate=0.5, calibration_questions="q?")
    with pytest.raises(ValueError, match=r"unique ids"):
        run_pipeline([records[0], records[0]], retriever, lm=lm, mode="no-retrieval", progress=False)


def test_an_infinite_delta_is_written_as_a_string(records, retriever, lm, one_torch_thread):
    report = run_pipeline(
        records[:1], retriever, lm=lm, mode="no-retrieval", threshold=float("inf"), progress=False, **FAST
    )
    assert report["settings"]["threshold"] == "inf"
    json.dumps(report, allow_nan=False)
