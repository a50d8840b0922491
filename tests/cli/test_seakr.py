"""``adaptive-gates seakr``: the SeaKR pipeline run from the command line."""

from __future__ import annotations

import argparse
import json

import pytest

from adaptive_gates.cli import main
from adaptive_gates.cli.seakr import demo_count
from adaptive_gates.records.data import write_jsonl
from adaptive_gates.seakr.reasoning_prompt import DEFAULT_DEMOS


@pytest.fixture(scope="module")
def qa_file(qa_records, tmp_path_factory):
    path = tmp_path_factory.mktemp("qa") / "qa.jsonl"
    write_jsonl(path, [{"id": r.id, "question": r.question, "answers": list(r.answers)} for r in qa_records[:3]])
    return path


def test_demo_count():
    assert demo_count("1") == 1 and demo_count(str(len(DEFAULT_DEMOS))) == len(DEFAULT_DEMOS)
    with pytest.raises(argparse.ArgumentTypeError, match=f"at most {len(DEFAULT_DEMOS)}"):
        demo_count(str(len(DEFAULT_DEMOS) + 1))
    with pytest.raises(argparse.ArgumentTypeError, match="positive integer"):
        demo_count("0")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "--mode multihop needs δ"),
        (["--threshold", "1", "--target-rate", "0.5"], "not both"),
        (["--target-rate", "0.5"], "give --train QA.jsonl"),
        (["--threshold", "1", "--train", "QA"], "with --threshold there is nothing to calibrate"),
        (["--mode", "simple", "--threshold", "1"], "--threshold: δ is used by --mode multihop only, not simple"),
        (["--mode", "no-retrieval", "--train", "QA"], "--train goes with --target-rate"),
        (["--demos", "99"], "--demos"),
    ],
)
def test_usage_errors_come_before_any_work(flags, message, qa_file, corpus_path, tmp_path, capsys, no_work):
    train = tmp_path / "train.jsonl"  # questions of their own: --test is never among them
    train.write_bytes(qa_file.read_bytes())
    flags = [str(train) if f == "QA" else f for f in flags]
    argv = ["seakr", "--test", str(qa_file), "--corpus", str(corpus_path), "--json", str(tmp_path / "r.json"), *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("adaptive-gates: error:") and message in err
    assert not (tmp_path / "r.json").exists()


def test_a_run_writes_the_report_and_prints_its_line(qa_file, corpus_path, tmp_path, capsys, lm, one_torch_thread):
    out = tmp_path / "seakr.json"
    argv = [
        "seakr", "--test", str(qa_file), "--corpus", str(corpus_path), "--json", str(out),
        "--mode", "single-retrieval", "--limit", "2", "--demos", "1", "--answer-tokens", "8", "--step-tokens", "8",
        "--samples", "2", "--sample-tokens", "4",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["n"] == 2 and report["mode"] == "single-retrieval"
    assert report["settings"]["demos"] == 1 and report["settings"]["answer_tokens"] == 8
    assert report["uncertainty"]["k"] == 2 and report["uncertainty"]["max_new_tokens"] == 4
    assert report["retrieval_calls"] == 2 and len(report["results"]) == 2
    line = capsys.readouterr().out
    assert line.startswith("seakr single-retrieval: n=2 ") and str(out) in line
