"""Fit the gates the package ships (``adaptive_gates.bundled.shipped``) on all 3,000 bundled
Llama-3.1-8B outcomes and save them into ``adaptive_gates/bundled/pretrained/``.

- draft-check: a ``DraftCheckGate``, its drafts the recorded answers without retrieval,
  checked by BM25 (k = 3) over the shared Wikipedia paragraph corpus (``--corpus``),
  questions embedded with the embedded MiniLM; plain drafts (``self_report=False``:
  Llama's recorded drafts were asked plainly, with no certainty) and the agreement
  columns read (``agreement="always"``), as it has shipped;
- stacked: the question-only ``StackedGate`` (no member gates: the question's features
  and its MiniLM embedding), which needs neither an LLM nor a retrieval to decide.

What to expect of each on questions it never saw is measured by
``benchmarks/adarague_gates.py`` (pooled and leave-one-task-out rows).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fit_pretrained.py [--corpus PATH] [--gates NAME ...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from _common import DEFAULT_DATA
from adaptive_gates import DraftCheckGate, Gate, StackedGate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.bundled.shipped import PRETRAINED, pretrained_path
from adaptive_gates.persistence.shipped_folder import writing_shipped_gates
from adaptive_gates.retrieval import BM25Retriever


def builders(corpus: Path) -> dict[str, Callable[[], Gate]]:
    return {
        "draft-check": lambda: DraftCheckGate(
            retriever=BM25Retriever.from_jsonl(corpus), self_report=False, agreement="always"
        ),
        "stacked": lambda: StackedGate(members=""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_DATA / "wiki_paragraph_corpus.jsonl")
    parser.add_argument("--gates", nargs="+", choices=PRETRAINED, default=list(PRETRAINED))
    args = parser.parse_args()
    records = adarague_outcomes()
    build = builders(args.corpus)
    for name in args.gates:
        start = time.perf_counter()
        gate = build[name]().fit_outcomes(records, sources=["adaptive_gates.bundled.datasets.adarague_outcomes()"])
        with writing_shipped_gates():  # the one save allowed into the package's shipped gates
            path = gate.save(pretrained_path(name), overwrite=True)
        print(f"{name}: fitted on {gate.fitted_on_.describe()} in {time.perf_counter() - start:.0f} s, saved to {path}")


if __name__ == "__main__":
    main()
