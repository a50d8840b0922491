"""How many of a model's own outcomes a draft-check gate needs: gap capture against the
number of outcomes fitted on, with gold labels and with agreement labels (no gold
answer read in the fit), per task, on the bundled Llama-3.1-8B outcomes.

Protocol: ``adaptive_gates.evaluation.learning_curve`` (what ``adaptive-gates fit
--learning-curve`` draws): for each size (50, 100, 200, 400, 500), per seed (0, 1, 2) a
subset drawn at random and 5-fold cross-fitted; every question scored by a gate fitted
on the other folds and judged against its **gold** answers, whatever labels the gate
was fitted on, so the agreement rows say what fitting without gold costs. Draft-check
as a user would fit it on their own records (the default gate: the draft is the
recorded answer without retrieval, asked plainly, checked against BM25, k = 3, over
``--corpus``; the agreement columns kept only where the fit's own check finds they help).
The single-hop tasks by default: the corpus holds the multi-hop questions' own
paragraphs, which flatters the check.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learning_curve.py [--tasks nq trivia squad] [--corpus PATH]

Writes benchmarks/results/learning_curve.{md,json}.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _common import DEFAULT_DATA, markdown_table, write_results
from adaptive_gates import CachedEmbedder, DraftCheckGate
from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, adarague_corpus, adarague_outcomes
from adaptive_gates.evaluation.learning_curve import LearningCurve, learning_curve
from adaptive_gates.models import default_embedder
from adaptive_gates.records.selfknowledge import LABELS
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.retrieval.cached import CachedRetriever


def _cell(curve: LearningCurve, size: int) -> str:
    point = next(p for p in curve.points if p.size == size)
    if point.mean is None:
        return "n/a"
    return f"{point.mean:+.3f} ± {point.spread:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=ADARAGUE_TASKS, default=["nq", "trivia", "squad"])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_DATA / "wiki_paragraph_corpus.jsonl")
    args = parser.parse_args()
    start = time.perf_counter()
    bm25 = (
        BM25Retriever.from_jsonl(args.corpus)
        if args.corpus.is_file()
        else BM25Retriever.from_records(adarague_corpus())
    )
    retriever, embedder = CachedRetriever(bm25), CachedEmbedder(default_embedder())
    curves: dict[str, dict[str, LearningCurve]] = {}
    for task in args.tasks:
        records = adarague_outcomes(task)
        curves[task] = {}
        for labels in LABELS:
            target = "helps" if labels == "agreement" else "gain"  # constant correctness with passages otherwise

            def factory(target: str = target) -> DraftCheckGate:
                # Llama's recorded drafts were asked plainly: no stated certainty to read
                return DraftCheckGate(retriever=retriever, embedder=embedder, target=target, self_report=False)

            curve = learning_curve(factory, records, name="draft-check", labels=labels, progress=True)
            curves[task][labels] = curve
            print(curve.table(), flush=True)
    sizes = [p.size for p in next(iter(next(iter(curves.values())).values())).points]
    rows = [
        [f"{task}, {labels} labels", *(_cell(curve, size) for size in sizes)]
        for task, by_labels in curves.items()
        for labels, curve in by_labels.items()
    ]
    bands = [[f"{task}: random gates, 95%", *(_band(curves[task]["gold"], size) for size in sizes)] for task in curves]
    corpus = args.corpus.name if args.corpus.is_file() else "the paragraphs bundled with the outcomes"
    markdown = (
        "# Learning curve: draft-check's gap capture against the outcomes it is fitted on "
        "(bundled Llama-3.1-8B outcomes, metric contains)\n\n"
        f"Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learning_curve.py`. Per size, seeds 0, 1, 2: a "
        "subset drawn at random, 5-fold cross-fitted, every question scored by a gate fitted on the other folds and "
        f"judged against its gold answers. BM25 k=3 over {corpus}. 'agreement labels': the gate fitted with no gold "
        "answer (the answer over the passages as the reference, target 'helps'). Mean ± standard deviation over the "
        "seeds.\n\n"
        + markdown_table(["fitted on", *(f"{s} outcomes" for s in sizes)], rows + bands)
        + f"\n\nRan in {time.perf_counter() - start:.0f} s.\n"
    )
    data = {task: {labels: c.to_dict() for labels, c in by_labels.items()} for task, by_labels in curves.items()}
    for path in write_results("learning_curve", markdown, {"tasks": data, "corpus": corpus}):
        print(f"wrote {path}")


def _band(curve: LearningCurve, size: int) -> str:
    point = next(p for p in curve.points if p.size == size)
    return "n/a" if point.random_band is None else f"{point.random_band[0]:+.3f} .. {point.random_band[1]:+.3f}"


if __name__ == "__main__":
    main()
