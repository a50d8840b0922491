"""The demo's main job end to end, at a small size, with the real LM and data."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adaptive_gates import load_outcomes, outcome_scores
from adaptive_gates.evaluation import random_band

DEMO = Path(__file__).resolve().parents[1] / "examples" / "selective_qa_demo.py"


def test_demo_runs_offline_end_to_end(tmp_path):
    result = subprocess.run(
        [sys.executable, str(DEMO), "--n-fit", "24", "--n-demo", "6", "--show", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "RETRIEVE" in out or "ANSWER DIRECTLY" in out
    assert "never retrieve : accuracy" in out and "always retrieve: accuracy" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["n"] == 6 and len(report["curve"]) == 7
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    assert sum(1 for _ in (tmp_path / "selfknowledge.jsonl").open()) == 24

    # The new questions were answered on both branches; the report's baselines,
    # the gate's accuracy and the random band all come from those answers.
    outcomes = load_outcomes(tmp_path / "new_questions.jsonl")
    assert len(outcomes) == 6
    a, b = outcome_scores(outcomes)
    retrieve = np.array([o.extra["gate_retrieved"] for o in outcomes])
    assert report["never"] == pytest.approx(a.mean()) and report["always"] == pytest.approx(b.mean())
    at = report["at_threshold"]
    assert at["accuracy"] == pytest.approx(np.where(retrieve, b, a).mean())
    calls = report["retrieval_calls"]
    assert calls == {"gate": int(retrieve.sum()), "always": 6, "saved": 6 - int(retrieve.sum())}
    assert f"retrieval calls {calls['gate']}/6, {calls['saved']} saved" in out

    band = report["random_band"]
    assert band == random_band(a, b, retrieve)
    low, high = band["accuracy"]
    assert low <= high and band["retrieval_rate"] == pytest.approx(retrieve.mean())
    assert f"random gate    : accuracy {low:.3f} .. {high:.3f}" in out
    if report["gap_capture"] is None:
        assert band["gap_capture"] is None and "gap capture    : n/a" in out
    else:
        g_low, g_high = band["gap_capture"]
        assert g_low < 0 < g_high
        assert f"gap capture    : {report['gap_capture']:+.3f}   random gates {g_low:+.3f} .. {g_high:+.3f}" in out
        gc = report["gap_capture"]
        where = "above" if gc > g_high else "below" if gc < g_low else "inside"
        assert report["verdict"]["gap_capture"].startswith(where)
    assert f"gap capture: {report['verdict']['gap_capture']}" in out
    assert f"accuracy at the threshold: {report['verdict']['accuracy']}" in out
