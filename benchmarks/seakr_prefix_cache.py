"""The SeaKR multi-hop pipeline with and without the LM's prompt-prefix KV cache.

Every prompt of the pipeline starts with the same ~490-token demo block, and some
prompts are sent twice (a greedy step, then the uncertainty U of the same prompt; a
re-ranking prompt, then the step read from the chosen snippet). With
``SeaKRPipeline(prefix_cache=4)`` the LM keeps the KV caches of its 4 latest prompts
and computes only what follows the longest token prefix a new prompt shares with one.

Questions: the first ``--n`` (3) of ``hotpotqa_dev_qa_only.jsonl``, BM25 over the whole
shared Wikipedia paragraph corpus, the embedded SmolLM2 on one thread, U from
``--samples`` (8) samples to keep the run short, δ = 3.5 (the HotpotQA run's,
``seakr_hotpotqa.RECORDED_THRESHOLD``). Each question is answered by both
pipelines, in alternating order (the machine is shared, so load drifts); the two traces
must agree: same steps, queries, snippets and answers, and U within 1e-4.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/seakr_prefix_cache.py [--n 3] [--samples 8]

Writes benchmarks/results/seakr_prefix_cache.{md,json}.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
from typing import Any

from _common import add_data_argument, markdown_table, write_results
from adaptive_gates.models.defaults import default_llm
from adaptive_gates.records.data import load_qa
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.seakr.pipeline import SeaKRPipeline
from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty
from seakr_hotpotqa import RECORDED_THRESHOLD

CACHE_SIZE = 4
TOLERANCE = 1e-4


def trace_gap(a: Any, b: Any) -> float | None:
    """Largest difference between the floats of two traces (``None`` when anything
    else differs: a text, a choice, the shape). Timings are not compared."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return None
        return _largest(trace_gap(a[k], b[k]) for k in a if k != "seconds")
    if isinstance(a, list) and isinstance(b, list):
        return _largest(map(trace_gap, a, b)) if len(a) == len(b) else None
    if isinstance(a, float) and isinstance(b, float) and math.isfinite(a) and math.isfinite(b):
        return abs(a - b)
    return 0.0 if a == b else None


def _largest(gaps: Any) -> float | None:
    gaps = list(gaps)
    return None if None in gaps else max(gaps, default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--n", type=int, default=3, help="questions (default 3)")
    parser.add_argument("--samples", type=int, default=8, help="k samples per uncertainty estimate (default 8)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    records = load_qa(args.data / "hotpotqa_dev_qa_only.jsonl")[: args.n]
    retriever = BM25Retriever.from_jsonl(args.data / "wiki_paragraph_corpus.jsonl")
    lm = default_llm()
    _ = lm.model  # load before timing
    uncertainty = SelfAwareUncertainty(lm, k=args.samples)
    # δ of the HotpotQA run (see seakr_hotpotqa.py), which the recorded results also used.
    pipelines = {
        size: SeaKRPipeline(retriever, lm, uncertainty=uncertainty, threshold=RECORDED_THRESHOLD, prefix_cache=size)
        for size in (0, CACHE_SIZE)
    }
    load_before = os.getloadavg()[0]
    rows = []
    for i, record in enumerate(records):
        order = (0, CACHE_SIZE) if i % 2 == 0 else (CACHE_SIZE, 0)
        results = {size: pipelines[size].answer(record.question) for size in order}
        off, on = results[0], results[CACHE_SIZE]
        gap = trace_gap(off.to_dict(), on.to_dict())
        rows.append(
            {
                "id": record.id,
                "steps": len(off.steps),
                "seconds_without": off.seconds,
                "seconds_with": on.seconds,
                "speedup": off.seconds / on.seconds,
                "same_trace": gap is not None and gap <= TOLERANCE,
                "largest_float_gap": gap,
            }
        )
        print(
            f"{record.id}: {off.seconds:.1f} s -> {on.seconds:.1f} s, x{off.seconds / on.seconds:.2f}, "
            f"same trace: {rows[-1]['same_trace']} (float gap {gap})"
        )
    total_without = sum(r["seconds_without"] for r in rows)
    total_with = sum(r["seconds_with"] for r in rows)
    data = {
        "samples": args.samples,
        "threshold": RECORDED_THRESHOLD,
        "prefix_cache": CACHE_SIZE,
        "model": lm.model_id,
        "threads": 1,
        "load_average": [load_before, os.getloadavg()[0]],
        "questions": rows,
        "seconds_without": total_without,
        "seconds_with": total_with,
        "speedup": total_without / total_with,
        "all_same": all(r["same_trace"] for r in rows),
    }
    header = ["question id", "steps", "s without cache", f"s with cache ({CACHE_SIZE})", "speed-up", "same trace"]
    table = [
        [r["id"], r["steps"], r["seconds_without"], r["seconds_with"], r["speedup"], r["same_trace"]] for r in rows
    ]
    table.append(["all", sum(r["steps"] for r in rows), total_without, total_with, data["speedup"], data["all_same"]])
    markdown = (
        markdown_table(header, table) + f"\n\nk={args.samples} samples per U, one torch thread, load average "
        f"{load_before:.1f} at the start and {data['load_average'][1]:.1f} at the end."
    )
    md, js = write_results("seakr_prefix_cache", markdown, data)
    print(markdown)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
