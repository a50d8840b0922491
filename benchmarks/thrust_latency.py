"""Thrust's scoring cost beyond the representation, and the representation's own cost.

1. ``ThrustGate._score`` given precomputed representations (a lookup table stands
   behind the gate): per query at batch size 1 (median and p90 over 1,000 queries)
   and per query in batches of 256, for SmolLM2's 576-d hidden states and MiniLM's
   384-d embeddings, with 4, 5, 12 and 50 centroids (N·K: 200 fitting queries, 400,
   3 classes of 200, 10 classes of 400). Also the bare formula (``thrust_vectors`` plus the norms) and
   the table lookup alone, so the share of the per-decision evidence is visible.
   Vectors are Gaussian: the cost depends on the shapes only.
2. For scale: computing the representation itself for real NQ questions, SmolLM2
   last-layer hidden state and MiniLM embedding, at batch sizes 1 and 16.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/thrust_latency.py [--data DIR]

Writes benchmarks/results/thrust_latency.{md,json}.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from _common import adarague_path, add_data_argument, markdown_table, write_results
from adaptive_gates import LMHiddenStateRepresenter, ThrustGate, load_outcomes
from adaptive_gates.models import default_embedder

QUERIES = 1000
BATCH = 256
#: (label, fitting queries per class, classes)
SHAPES = (
    ("N=1, 200 fitting", 200, 1),
    ("N=1, 400 fitting", 400, 1),
    ("N=3, 200 per class", 200, 3),
    ("N=10, 400 per class", 400, 10),
)
DIMENSIONS = {"SmolLM2 hidden state": 576, "MiniLM embedding": 384}
LIVE_QUESTIONS = 64


class TableRepresenter:
    """Serves precomputed vectors by text: what stands behind the gate when f(q) is known."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.model_id, self.dimension = "table", vectors.shape[1]
        self.table = {f"q{i}": v for i, v in enumerate(vectors)}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def per_call_us(call: Callable[[], Any], repeats: int) -> np.ndarray:
    """Microseconds of each of ``repeats`` calls."""
    out = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter_ns()
        call()
        out[i] = (time.perf_counter_ns() - start) / 1000
    return out


def scoring_cost(dim: int, per_class: int, classes: int, rng: np.random.Generator) -> dict[str, Any]:
    n_fit = per_class * classes
    vectors = (rng.normal(size=(n_fit + QUERIES, dim)) * 10).astype(np.float32)
    rep = TableRepresenter(vectors)
    names = list(rep.table)
    labels = [i % classes for i in range(n_fit)]
    gate = ThrustGate(rep, level_scores="in_sample").fit(names[:n_fit], labels if classes > 1 else None)
    queries = names[n_fit:]
    clusters = gate._clusters
    one = iter(queries)
    score_one = per_call_us(lambda: gate._score([next(one)]), QUERIES)
    one = iter(queries)
    lookup_one = per_call_us(lambda: gate._represent([next(one)]), QUERIES)
    q_vectors = iter(gate._represent(queries)[:, None, :])
    formula_one = per_call_us(lambda: gate._thrust(next(q_vectors), clusters), QUERIES)
    batches = [queries[i : i + BATCH] for i in range(0, QUERIES - BATCH + 1, BATCH)]
    it = iter(batches)
    score_batch = per_call_us(lambda: gate._score(next(it)), len(batches)) / BATCH
    return {
        "centroids": len(clusters.sizes),
        "score_batch1_median_us": float(np.median(score_one)),
        "score_batch1_p90_us": float(np.percentile(score_one, 90)),
        "formula_batch1_median_us": float(np.median(formula_one)),
        "lookup_batch1_median_us": float(np.median(lookup_one)),
        f"score_batch{BATCH}_per_query_us": float(np.median(score_batch)),
    }


def representation_cost(questions: list[str]) -> dict[str, dict[str, float]]:
    """Milliseconds per question to compute f(q) live, at batch sizes 1 and 16."""
    reps = {
        "SmolLM2 hidden state (last layer)": LMHiddenStateRepresenter(),
        "MiniLM embedding": default_embedder(),
    }
    out = {}
    for name, rep in reps.items():
        rep.embed(questions[:4])  # load and warm up
        row = {}
        for batch in (1, 16):
            chunks = [questions[i : i + batch] for i in range(0, len(questions), batch)]
            it = iter(chunks)
            row[f"batch{batch}_ms_per_question"] = float(
                np.median(per_call_us(lambda: rep.embed(next(it)), len(chunks))) / batch / 1000
            )
        out[name] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rng = np.random.default_rng(0)
    scoring = {
        rep_name: {label: scoring_cost(dim, per_class, classes, rng) for label, per_class, classes in SHAPES}
        for rep_name, dim in DIMENSIONS.items()
    }
    questions = [r.question for r in load_outcomes(adarague_path(args.data, "nq"))][:LIVE_QUESTIONS]
    live = representation_cost(questions)
    results = {"queries": QUERIES, "batch": BATCH, "scoring": scoring, "representation": live}

    rows = [
        [
            rep_name,
            label,
            c["centroids"],
            c["score_batch1_median_us"],
            c["score_batch1_p90_us"],
            c["formula_batch1_median_us"],
            c["lookup_batch1_median_us"],
            c[f"score_batch{BATCH}_per_query_us"],
        ]
        for rep_name, shapes in scoring.items()
        for label, c in shapes.items()
    ]
    markdown = "\n\n".join(
        [
            "# Thrust scoring cost (one CPU thread)",
            f"`_score` with precomputed representations: batch 1 over {QUERIES} queries, and per query in batches "
            f"of {BATCH}. 'formula' = the thrust computation alone; 'lookup' = fetching f(q) from the table. "
            "The rest of `_score` is building each decision's evidence (nearest cluster, per-class thrust).",
            markdown_table(
                [
                    "representation",
                    "fitted on",
                    "centroids",
                    "median µs (batch 1)",
                    "p90 µs (batch 1)",
                    "formula µs (batch 1)",
                    "lookup µs (batch 1)",
                    f"µs per query (batch {BATCH})",
                ],
                rows,
            ),
            f"## Computing the representation itself ({LIVE_QUESTIONS} NQ questions)",
            markdown_table(
                ["representation", "ms per question (batch 1)", "ms per question (batch 16)"],
                [[name, r["batch1_ms_per_question"], r["batch16_ms_per_question"]] for name, r in live.items()],
            ),
        ]
    )
    print(markdown)
    for path in write_results("thrust_latency", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
