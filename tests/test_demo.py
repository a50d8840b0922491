"""The demo's main job end to end, at a small size, with the real LM and data."""

import json
import os
import subprocess
import sys
from pathlib import Path

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
