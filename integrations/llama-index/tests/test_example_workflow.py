"""examples/llamaindex_workflow.py runs offline, at a small size, and prints each
question's streamed workflow events and the answer of the route they took. Its runs
with either gate share one process (``run_scripts``), so torch and the models load once."""

from __future__ import annotations

import os
import re
import runpy
import sys
from pathlib import Path

import pytest

from support.example_scripts import run_scripts  # the core suite's (pythonpath in pyproject.toml)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "llamaindex_workflow.py"
SMALL = ["--n", "2", "--passages", "4", "--max-tokens", "4", "--n-fit", "60"]
ROUTE_OF = {"RetrieveEvent": "retrieve", "AnswerDirectlyEvent": "direct", "DraftAnswerEvent": "draft"}
ROUTED = re.compile(r"^(RetrieveEvent|AnswerDirectlyEvent|DraftAnswerEvent): score \S+  threshold \S+  \((\S+)\)$")


@pytest.fixture(scope="module")
def printed(tmp_path_factory) -> dict[str, str]:
    """What the example printed with each gate, the SKR-kNN one on two questions and the
    verbalized one on one, run as ``python examples/llamaindex_workflow.py`` runs."""
    folder = tmp_path_factory.mktemp("workflow")
    runs = [
        (EXAMPLE.name, SMALL, folder / "skr-knn.txt"),
        (EXAMPLE.name, [*SMALL, "--n", "1", "--gate", "verbalized"], folder / "verbalized.txt"),
    ]
    path = os.pathsep.join(
        filter(None, [str(ROOT), str(ROOT / "integrations" / "llama-index"), os.environ.get("PYTHONPATH")])
    )
    knn, verbalized = run_scripts(EXAMPLE.parent, runs, env={"PYTHONPATH": path})
    return {"skr-knn": knn, "verbalized": verbalized}


def _check(out: str, gate: str, asked: int) -> None:
    """Each question: its routing event, the nodes when it retrieved, the answer of that
    route; the closing counts add up."""
    body, _, summary = out.partition("\n\nroutes: ")
    blocks = [block.strip().splitlines() for block in body.split("\nQ: ")[1:]]
    assert len(blocks) == asked
    taken = {"retrieve": 0, "direct": 0, "draft": 0}
    for lines in blocks:
        routed = ROUTED.match(lines[1].strip())
        assert routed and routed.group(2) == gate, lines
        route = ROUTE_OF[routed.group(1)]
        taken[route] += 1
        if route == "retrieve":
            assert re.match(r"^NodesRetrievedEvent: 2 nodes \(.+\)$", lines[2].strip()), lines
        assert len(lines) == (4 if route == "retrieve" else 3)
        assert lines[-1].strip().startswith(f"answer ({route}): ")
    counts = ", ".join(f"{route} {n}" for route, n in taken.items())
    assert summary.startswith(f"{counts} of {asked} questions")


def test_the_workflow_example_with_the_knn_gate(printed):
    out = printed["skr-knn"]
    assert "index: 4 BoolQ passages in a VectorStoreIndex (MiniLM); LLM: SmolLM2" in out
    assert re.search(r"gate: SKR-kNN \(k=10\) on 60 AdaRAGUE NQ outcomes: \d+ known \+ \d+ unknown", out)
    _check(out, "skr-knn", 2)


def test_the_workflow_example_with_the_verbalized_gate(printed):
    _check(printed["verbalized"], "verbalized", 1)


def test_a_bad_size_is_refused(monkeypatch, capsys):
    # in this process: a refusal comes before any work, so there is nothing to isolate
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--top-k", "0"])
    with pytest.raises(SystemExit) as refused:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert refused.value.code == 2 and "--top-k must be at least 1" in capsys.readouterr().err
