"""A gate ``eval`` scores as it was saved."""

from __future__ import annotations

import json

import pytest

from adaptive_gates.cli import main
from adaptive_gates.cli.command import build_parser
from adaptive_gates.cli.saved_gates import (
    PRETRAINED_PREFIX,
    check_scored_as_saved,
    load_saved_gate,
    saved_location,
)
from adaptive_gates.errors import UsageError
from adaptive_gates.gates import BM25DifficultyGate
from adaptive_gates.records.data import load_outcomes


@pytest.fixture(scope="module")
def saved(split, tmp_path_factory):
    train = load_outcomes(split / "train.jsonl")
    gate = BM25DifficultyGate().fit_outcomes(train[:100])
    return gate.save(tmp_path_factory.mktemp("gates") / "bm25")


def parse(*argv):
    return build_parser().parse_args(list(argv))


def test_saved_location_tells_saved_gates_from_names(saved, tmp_path, monkeypatch):
    assert saved_location(str(saved)) == saved
    assert saved_location("bm25-difficulty") is None
    assert saved_location(str(tmp_path / "missing")) is None
    assert saved_location(f"{PRETRAINED_PREFIX}stacked").name == "stacked"
    with pytest.raises(UsageError, match=r"--gate: no pretrained gate"):
        saved_location(f"{PRETRAINED_PREFIX}nope")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bm25-difficulty").mkdir()
    assert saved_location("bm25-difficulty") is None  # the gate's name wins
    assert saved_location("./bm25-difficulty") is not None


def test_fitting_flags_are_refused_for_a_saved_gate(saved, split, tmp_path):
    test = str(split / "test.jsonl")
    args = parse("eval", "--gate", str(saved), "--test", test, "--json", str(tmp_path / "r.json"))
    check_scored_as_saved(args)
    fitted = parse(
        "eval",
        "--gate",
        str(saved),
        "--test",
        test,
        "--json",
        str(tmp_path / "r.json"),
        "--option",
        "top_k=3",
        "--labels",
        "gold",
    )
    with pytest.raises(UsageError, match=r"--option, --labels: --gate .* is a saved gate"):
        check_scored_as_saved(fitted)


def test_load_saved_gate_loads_the_saved_type(saved, split, tmp_path):
    args = parse("eval", "--gate", str(saved), "--test", str(split / "test.jsonl"), "--json", str(tmp_path / "r.json"))
    gate = load_saved_gate(args, saved)
    assert isinstance(gate, BM25DifficultyGate)
    assert gate.threshold_ == BM25DifficultyGate.load(saved).threshold_


def test_eval_scores_a_saved_gate_as_it_is(saved, split, tmp_path, capsys):
    out = tmp_path / "report.json"
    status = main(["eval", "--gate", str(saved), "--test", str(split / "test.jsonl"), "--json", str(out)])
    assert status == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["gate"] == "bm25-difficulty"
    assert report["n"] == len(load_outcomes(split / "test.jsonl"))
    assert report["fitted_on"]["records"] == 100
    status = main(
        ["eval", "--gate", str(saved), "--test", str(split / "test.jsonl"), "--json", str(out), "--option", "top_k=3"]
    )
    assert status == 2
    assert "is a saved gate, scored as it was fitted" in capsys.readouterr().err
