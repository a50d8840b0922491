"""The ``adaptive-gates`` command on real outcome records."""

import json
import subprocess
import sys

import pytest

from adaptive_gates import SKRKnnGate, load_outcomes
from adaptive_gates.cli import main
from adaptive_gates.data import write_jsonl

REPORT_FIELDS = {"gate", "n", "metric", "never", "always", "oracle", "auc", "auc_random", "auc_oracle",
                 "gap_capture", "decision_auroc", "curve", "at_threshold"}


@pytest.fixture(scope="module")
def split(outcome_records, tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    cut = len(outcome_records) * 7 // 10
    write_jsonl(root / "train.jsonl", [r.to_json() for r in outcome_records[:cut]])
    write_jsonl(root / "test.jsonl", [r.to_json() for r in outcome_records[cut:]])
    return root


@pytest.mark.parametrize("gate, options", [("skr-knn", []), ("skr-cls", []),
                                           ("skr-knn", ["--option", "k=20", "--option", "vote=majority"])])
def test_eval_writes_the_report(split, tmp_path, gate, options):
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["eval", "--gate", gate, "--train", str(split / "train.jsonl"), "--test", str(split / "test.jsonl"),
                 "--json", str(out), "--plot", str(plot), "--target-rate", "0.3", *options])
    assert code == 0
    report = json.loads(out.read_text())
    assert REPORT_FIELDS <= set(report)
    n_test = len(load_outcomes(split / "test.jsonl"))
    assert report["gate"] == gate and report["n"] == n_test and report["metric"] == "contains"
    assert len(report["curve"]) == n_test + 1 and report["curve"][0] == pytest.approx([0.0, report["never"]], abs=1e-6)
    assert report["curve"][-1][1] == pytest.approx(report["always"])
    assert report["auc_random"] <= report["auc_oracle"] and report["never"] <= report["oracle"]
    at = report["at_threshold"]
    assert at["target_rate"] == 0.3 and 0.0 <= at["retrieval_rate"] <= 1.0
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_eval_with_em_metric_and_rule_threshold(split, tmp_path):
    out = tmp_path / "r.json"
    assert main(["eval", "--gate", "skr-knn", "--train", str(split / "train.jsonl"), "--test",
                 str(split / "test.jsonl"), "--json", str(out), "--metric", "em"]) == 0
    report = json.loads(out.read_text())
    assert report["metric"] == "em" and report["at_threshold"]["target_rate"] is None


def test_fit_saves_a_calibrated_gate(split, tmp_path):
    out = tmp_path / "gate"
    assert main(["fit", "--gate", "skr-knn", "--train", str(split / "train.jsonl"), "--out", str(out),
                 "--option", "weighting=similarity", "--objective", "--max-rate", "0.4"]) == 0
    gate = SKRKnnGate.load(out)
    assert gate.weighting == "similarity" and gate.calibration_.method == "objective"
    assert gate.calibration_.realised_rate <= 0.4
    # A second fit into the same place is refused without --overwrite.
    assert main(["fit", "--gate", "skr-knn", "--train", str(split / "train.jsonl"), "--out", str(out)]) == 2


def test_bad_invocations_fail_clearly(split, tmp_path, capsys):
    with pytest.raises(SystemExit, match="unknown gate"):
        main(["eval", "--gate", "nope", "--train", str(split / "train.jsonl"), "--test", str(split / "test.jsonl"),
              "--json", str(tmp_path / "r.json")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "question": "q"}\n')
    assert main(["eval", "--gate", "skr-knn", "--train", str(bad), "--test", str(split / "test.jsonl"),
                 "--json", str(tmp_path / "r.json")]) == 2
    assert "bad.jsonl:1: field 'answers' is missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "--gate", "skr-knn", "--train", str(bad), "--test", str(bad), "--json", "x", "--option", "k"])


def test_console_script_is_installed():
    result = subprocess.run([sys.executable, "-m", "adaptive_gates.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "eval" in result.stdout and "collect" in result.stdout
