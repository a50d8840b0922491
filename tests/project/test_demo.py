"""The demo end to end at a small size, with the real packaged outcomes, LM and data."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adaptive_gates import PopularityGate, load_outcomes, outcome_scores
from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, adarague_outcomes
from adaptive_gates.evaluation import cross_fitted_decisions, random_band

DEMO = Path(__file__).resolve().parents[2] / "examples" / "selective_qa_demo.py"
PER_TASK, FOLDS = 30, 3
#: Questions the small model answers on both branches to fit the gate, then through it.
N_FIT, N_DEMO = 8, 4
#: Characters of each passage the small model reads: its prompts' prefill is most of the
#: mechanics' time, and the test checks how answers flow, not what they say.
PASSAGE_CHARS = 150


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One small run of the demo: its output folder and what it printed."""
    out = tmp_path_factory.mktemp("demo")
    result = subprocess.run(
        [
            sys.executable,
            str(DEMO),
            "--per-task",
            str(PER_TASK),
            "--folds",
            str(FOLDS),
            "--n-fit",
            str(N_FIT),
            "--n-demo",
            str(N_DEMO),
            "--k",
            "3",
            "--show",
            "2",
            "--passage-chars",
            str(PASSAGE_CHARS),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result.stdout


def test_the_proof_judges_gates_on_llama_outcomes_they_never_saw(demo):
    out, printed = demo
    assert printed.index("[1] PROOF on a capable LLM") < printed.index("[2] MECHANICS")
    results = json.loads((out / "proof_report.json").read_text())
    assert results["setting"] == "pooled" and results["calibration"] == "best accuracy"
    assert list(results["gates"]) == ["draft-check", "stacked (question)", "skr-knn (k=10)", "popularity"]
    # without the shared folder the drafts are checked against the paragraphs bundled with the outcomes
    assert results["draft_corpus"].startswith("BM25 over the ") and "bundled" in results["draft_corpus"]
    assert (out / "proof_curve.png").read_bytes()[:4] == b"\x89PNG"

    # The popularity gate's reports are those of its decisions cross-fitted here, on all tasks at once.
    tasks = {t: adarague_outcomes(t)[:PER_TASK] for t in ADARAGUE_TASKS}
    reports = results["gates"]["popularity"]
    assert list(reports) == [*ADARAGUE_TASKS, "all"]
    _, pooled, _ = cross_fitted_decisions(PopularityGate, [r for rows in tasks.values() for r in rows], folds=FOLDS)
    decided = {t: pooled[i * PER_TASK : (i + 1) * PER_TASK] for i, t in enumerate(tasks)}
    for task, rows in tasks.items():
        a, b = outcome_scores(rows)
        report, retrieve = reports[task], decided[task]
        assert report["n"] == PER_TASK and report["never"] == pytest.approx(a.mean())
        assert report["always"] == pytest.approx(b.mean())
        assert report["in_accuracy"] == pytest.approx(np.where(retrieve, b, a).mean())
        assert report["retrieval_calls"] == pytest.approx(retrieve.mean()) and report["lm_calls"] == 1.0
        assert report["random_band"] == random_band(a, b, retrieve)
        assert 0 <= report["calls_to_match_always"] <= 1
    overall = reports["all"]
    assert overall["n"] == PER_TASK * len(tasks)
    assert overall["retrieval_calls"] == pytest.approx(np.mean([decided[t].mean() for t in tasks]))

    # The leading gate checks each draft with one retrieval: one per question, and an
    # LM call more where it answers again over the passages.
    lead = results["gates"]["draft-check"]
    for key, report in lead.items():
        rate = report["at_threshold"]["retrieval_rate"]
        assert report["retrieval_calls"] == 1.0 and report["lm_calls"] == pytest.approx(1.0 + rate)
        # The printed table holds the leading gate per task, and every gate overall.
        row = (
            f"{key:<18}{report['n']:>5}  {report['never']:.3f}  {report['always']:.3f}  {report['oracle']:.3f}"
            f" | {report['in_accuracy']:.3f} at {rate:.2f}"
        )
        assert row in printed
    assert f"popularity          {PER_TASK * len(tasks)}" in printed
    assert "what is proven (outside the band of random gates):" in printed and "What is not proven:" in printed
    verdict = results["verdicts"]["draft-check"]["all"]["gap_capture"]
    assert verdict.startswith(("above", "inside", "below"))
    assert verdict in printed


def test_the_mechanics_answer_through_the_gate_with_the_small_model(demo):
    out, printed = demo
    assert "SmolLM2-135M" in printed and ("RETRIEVE" in printed or "ANSWER DIRECTLY" in printed)
    report = json.loads((out / "mechanics_report.json").read_text())
    assert report["n"] == N_DEMO and len(report["curve"]) == N_DEMO + 1
    assert (out / "mechanics_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert sum(1 for _ in (out / "selfknowledge.jsonl").open()) == N_FIT

    # The new questions were answered on both branches; the report's baselines,
    # the gate's accuracy, its calls and the random band all come from those answers.
    outcomes = load_outcomes(out / "new_questions.jsonl")
    assert len(outcomes) == N_DEMO
    a, b = outcome_scores(outcomes)
    retrieve = np.array([o.extra["gate_retrieved"] for o in outcomes])
    assert report["never"] == pytest.approx(a.mean()) and report["always"] == pytest.approx(b.mean())
    assert report["in_accuracy"] == pytest.approx(np.where(retrieve, b, a).mean())
    assert report["retrieval_calls"] == pytest.approx(retrieve.mean())
    calls = int(retrieve.sum())
    assert f"retrieval calls {calls}/{N_DEMO}, {N_DEMO - calls} saved" in printed

    band = report["random_band"]
    assert band == random_band(a, b, retrieve)
    low, high = band["accuracy"]
    assert f"random gate    : accuracy {low:.3f} .. {high:.3f}" in printed
    if report["gap_capture"] is None:
        assert band["gap_capture"] is None and "gap capture    : n/a" in printed
    else:
        g_low, g_high = band["gap_capture"]
        gc = report["gap_capture"]
        where = "above" if gc > g_high else "below" if gc < g_low else "inside"
        assert report["verdict"]["gap_capture"].startswith(where)
    assert f"gap capture: {report['verdict']['gap_capture']}" in printed
