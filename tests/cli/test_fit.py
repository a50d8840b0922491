"""What ``adaptive-gates fit`` says about the gate it saves: the files and outcomes it was
fitted on, its cross-fitted figure on them, and (``--learning-curve``) how that figure
grows with the outcomes used; ``--labels agreement`` fits records without gold answers.

The files are the bundled AdaRAGUE outcomes (Llama-3.1-8B on NQ); the records without
gold are NQ questions written with ``"answers": []`` and another model's name.
"""

import json
import re

import pytest

from adaptive_gates import PopularityGate, StackedGate, load_gate, load_outcome_files, load_outcomes
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.cli import main
from adaptive_gates.evaluation import evaluate_scores, learning_curve, random_band
from adaptive_gates.gates.base.calibration import threshold_for_rate
from adaptive_gates.gates.base.folds import cross_fitted_scores
from adaptive_gates.records.data import write_jsonl
from adaptive_gates.records.selfknowledge import agreement_records, outcome_scores

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PREFIX = "adaptive-gates: error: "
QUICK = ["--gate", "stacked", "--option", "members=", "--option", "embedding=false", "--option", "model=logistic"]
OTHER_LLM = "acme/Other-LLM-7B"


def quick_gate(**params):
    return StackedGate(members="", embedding=False, model="logistic", **params)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    nq = adarague_outcomes("nq")
    write_jsonl(root / "first.jsonl", [r.to_json() for r in nq[:80]])
    write_jsonl(root / "second.jsonl", [r.to_json() for r in nq[80:160]])
    write_jsonl(root / "nogold.jsonl", [{**r.to_json(), "answers": [], "llm": OTHER_LLM} for r in nq[200:350]])
    return root


def _figure(line: str) -> float:
    return float(re.search(r"gap_capture=([-+]\d\.\d{3}) ", line).group(1))


def test_fit_records_its_files_and_prints_its_cross_fitted_figure_from_the_calibrations_scores(files, tmp_path, capsys):
    out = tmp_path / "gate"
    train = [files / "first.jsonl", files / "second.jsonl"]
    argv = ["fit", *QUICK, "--train", *map(str, train), "--out", str(out), "--target-rate", "0.3"]
    assert main([*argv, "--folds", "4", "--seed", "2"]) == 0
    gate = load_gate(out)
    assert json.loads((out / "config.json").read_text())["fitted_on"]["sources"] == [str(p) for p in train]
    assert gate.fitted_on_.sources == tuple(str(p) for p in train) and gate.fitted_on_.records == 160

    # the out-of-fold scores of 4 folds with seed 2 set both the threshold and the printed figure
    records = load_outcome_files(train)
    oof = cross_fitted_scores(quick_gate, records, "contains", 4, 2)
    assert gate.threshold_ == threshold_for_rate(oof, 0.3).threshold and gate.calibration_.n == 160
    a, b = outcome_scores(records)
    capture = evaluate_scores(oof, a, b, gate="stacked", metric="contains")["gap_capture"]
    low, high = random_band(a, b)["gap_capture"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"fitted on {gate.fitted_on_.describe()}"
    assert lines[0].startswith("fitted on 160 outcomes of meta-llama/Llama-3.1-8B-Instruct (gold labels, contains)")
    assert lines[1].startswith("cross-fitted on its 160 training records (4 folds, seed 2, judged by gold): ")
    assert _figure(lines[1]) == pytest.approx(capture, abs=5e-4)
    assert lines[1].endswith(f"| random 95%: gap_capture=[{low:+.3f}, {high:+.3f}]")
    assert lines[2].startswith("saved StackedGate(")


def test_fit_without_crossfit_prints_no_figure(files, tmp_path, capsys):
    out = tmp_path / "gate"
    assert main(["fit", *QUICK, "--train", str(files / "first.jsonl"), "--out", str(out), "--no-crossfit"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("fitted on 80 outcomes") and lines[1].startswith("saved ")


def test_fit_on_agreement_labels_learns_the_helps_target_from_records_without_gold(files, tmp_path, capsys):
    out = tmp_path / "gate"
    argv = ["fit", *QUICK, "--labels", "agreement", "--train", str(files / "nogold.jsonl"), "--out", str(out)]
    assert main([*argv, "--target-rate", "0.4"]) == 0
    gate = load_gate(out)
    assert gate.target == "helps"  # set for the agreement labels: the gain's second head would learn a constant
    assert gate.fitted_on_.labels == "agreement" and gate.fitted_on_.model == OTHER_LLM
    # the figure is judged by agreement, the only judge records without gold allow
    records = load_outcomes(files / "nogold.jsonl")
    oof = cross_fitted_scores(lambda: quick_gate(target="helps"), records, "contains", 5, 0, labels="agreement")
    a, b = outcome_scores(agreement_records(records))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"fitted on 150 outcomes of {OTHER_LLM} (agreement labels, contains)")
    assert "judged by agreement" in lines[1]
    assert _figure(lines[1]) == pytest.approx(evaluate_scores(oof, a, b, gate="s", metric="c")["gap_capture"], abs=5e-4)


def test_fit_plots_and_prints_a_learning_curve(files, tmp_path, capsys):
    out, plot = tmp_path / "gate", tmp_path / "curve.png"
    argv = ["fit", "--gate", "popularity", "--train", str(files / "first.jsonl"), str(files / "second.jsonl")]
    assert main([*argv, "--out", str(out), "--folds", "3", "--learning-curve", str(plot), "--no-crossfit"]) == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"
    expected = learning_curve(
        PopularityGate, load_outcome_files([files / "first.jsonl", files / "second.jsonl"]), name="popularity", folds=3
    )
    assert [p.size for p in expected.points] == [50, 100, 160]
    printed = capsys.readouterr().out
    assert expected.table() in printed
    rows = printed.split(expected.table().splitlines()[1])[1].split()
    assert rows[0] == "50" and rows[1] == f"{expected.points[0].mean:+.3f}"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--labels", "agreement", "--objective"], "--objective with --labels agreement: the answer with retrieval"),
        (["--folds", "1"], "argument --folds: must be an integer of at least 2, got '1'"),
        (["--learning-curve", "{out}/curve.txt"], "argument --learning-curve: {out}/curve.txt: not a plot format"),
        (["--labels", "agreement", "--option", "target=gain"], "--option target=gain: with --labels agreement"),
    ],
)
def test_bad_fit_flags_fail_with_one_line_before_any_work(files, tmp_path, capsys, no_work, extra, message):
    argv = ["fit", *QUICK, "--train", str(files / "first.jsonl"), "--out", str(tmp_path / "gate")]
    assert main([*argv, *(a.format(out=tmp_path) for a in extra)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(PREFIX) and captured.err.count("\n") == 1
    assert message.format(out=tmp_path) in captured.err and captured.out == ""


def test_a_learning_curve_needs_enough_records_for_its_folds(files, tmp_path, capsys):
    few = tmp_path / "few.jsonl"
    write_jsonl(few, [r.to_json() for r in load_outcomes(files / "first.jsonl")[:7]])
    out = tmp_path / "gate"
    argv = [
        "fit",
        "--gate",
        "popularity",
        "--train",
        str(few),
        "--out",
        str(out),
        "--learning-curve",
        str(tmp_path / "c.png"),
    ]
    assert main([*argv, "--folds", "4"]) == 2
    assert capsys.readouterr().err == f"{PREFIX}7 records are too few for a 4-fold learning curve (at least 8)\n"
    assert not out.exists()  # refused before the fit
