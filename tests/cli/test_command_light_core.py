"""The ``adaptive-gates`` command in the light core: a child process in which none of
the extras' packages (fastapi, pydantic, torch, matplotlib, ...) can be imported runs
the help of every subcommand, evaluates a gate that needs none of them on the packaged
outcome records, and says which extra ``serve`` needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.blocked_imports import EXTRAS, run_without

COMMAND = ("-m", "adaptive_gates.cli")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "blocker"


@pytest.mark.parametrize("subcommand", [(), ("eval",), ("fit",), ("collect",), ("seakr",), ("serve",)])
def test_help_of_every_subcommand_needs_no_extra(folder, subcommand):
    done = run_without(EXTRAS, folder, [*COMMAND, *subcommand, "--help"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: adaptive-gates {' '.join(subcommand)}".rstrip())
    if subcommand == ("serve",):  # the flags of the limits, from Limits' fields
        assert "--max-body-bytes" in done.stdout and "--rate-limit" in done.stdout


def test_blocker_refuses_the_extras(folder):
    done = run_without(EXTRAS, folder, ["-c", "import pydantic"])
    assert done.returncode == 1 and "No module named 'pydantic'" in done.stderr


def test_eval_of_the_popularity_gate_needs_no_extra(folder, tmp_path):
    report = tmp_path / "report.json"
    args = ["eval", "--gate", "popularity", "--train", "bundled:nq", "--test", "bundled:trivia"]
    done = run_without(EXTRAS, folder, [*COMMAND, *args, "--json", str(report)])
    assert done.returncode == 0, done.stderr
    written = json.loads(report.read_text())
    assert written["gate"] == "popularity" and written["n"] == 500
    assert 0 < written["at_threshold"]["retrieval_rate"] <= 1
    assert done.stdout.startswith("popularity: n=500 ")


def test_serve_without_its_extra_names_it(folder):
    done = run_without(EXTRAS, folder, [*COMMAND, "serve"])
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "adaptive-gates: error: fastapi is not installed; it comes with the 'serve' extra: "
        "pip install 'adaptive-gates[serve]'"
    )


def test_the_package_and_its_light_gates_need_no_extra(folder):
    code = f"""
import sys
import adaptive_gates as ag
from adaptive_gates.bundled.datasets import adarague_outcomes

records = adarague_outcomes("nq")[:200]
popularity = ag.PopularityGate()
rare, common = popularity.decide_batch(["Who was Ptolemy Apion?", "What is the color of the sky?"])
assert rare.error is None and common.error is None and rare.retrieve and not common.retrieve, (rare, common)
difficulty = ag.BM25DifficultyGate().fit([r.question for r in records])
decision = difficulty.decide(records[0].question)
assert decision.error is None and decision.score == decision.score, decision
print(sorted(name for name in sys.modules if name.partition(".")[0] in {set(EXTRAS)!r}))
"""
    done = run_without(EXTRAS, folder, ["-c", code])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
