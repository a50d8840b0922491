"""What the LlamaIndex components add on top of the gate's own work.

Selector: an ``SKRKnnGate`` (k=10) is fitted on the NQ outcome records of AdaRAGUE
(500 real questions, MiniLM); the queries are 200 held-out SQuAD questions, every
embedding computed once up front and served from a table (``CachedEmbedder``), so the
gate's own work (a lookup and a faiss search over 500 vectors) is small and stable.
The two engines answer instantly (a ``CustomQueryEngine`` returning a constant), so
what is left is the selector and LlamaIndex's router. Per question, interleaved, order
rotated each round, ``--repeats`` rounds over the 200 questions, sync and async:

- ``gate``: ``gate.decide(q)`` / ``await gate.adecide(q)``;
- ``selector``: ``GateSelector.select`` / ``aselect`` over the two choices;
- ``by hand``: the gate's decision, then the engine it picks, queried directly;
- ``router``: ``RouterQueryEngine.query`` / ``aquery`` with the ``GateSelector``.

The overheads are paired differences per question and round: selector - gate, and
router - by hand (what routing through LlamaIndex costs beyond deciding and querying
the engine yourself); median and p90 (goal: under 1 ms).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/llamaindex_overhead.py [--data DIR] [--repeats 20]

Needs ``llama-index-adaptive-gates`` (integrations/llama-index) importable. Writes
benchmarks/results/llamaindex_overhead.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import torch
from llama_index.core import __version__ as llama_index_core_version
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import CustomQueryEngine, RouterQueryEngine
from llama_index.core.tools import QueryEngineTool
from llama_index.selectors.adaptive_gates import GateSelector

from _common import adarague_path, add_data_argument, markdown_table, write_results
from adaptive_gates import CachedEmbedder, Gate, SKRKnnGate, load_outcomes
from adaptive_gates.models import default_embedder

K = 10
QUERIES = 200
GOAL_MS = 1.0
WARM_UP = 5


def build(data: Any) -> tuple[SKRKnnGate, list[str]]:
    """The gate, whose embedder already holds every question's vector, and the queries."""
    memory = load_outcomes(adarague_path(data, "nq"))
    queries = list(dict.fromkeys(r.question for r in load_outcomes(adarague_path(data, "squad"))))[:QUERIES]
    inner = default_embedder()
    texts = [r.question for r in memory] + queries
    embedder = CachedEmbedder(inner)
    embedder.store(texts, inner.embed(texts))
    return SKRKnnGate(embedder, k=K).fit_outcomes(memory), queries


def percentiles(values: list[float] | np.ndarray) -> dict[str, float]:
    """Median and p90 of durations in seconds, in milliseconds."""
    ms = np.asarray(values) * 1000
    return {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)), "n": int(ms.size)}


def interleaved(calls: dict[str, Callable[[str], Any]], queries: list[str], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each variant: per question, every variant in turn, the order
    rotated from question to question and round to round."""
    for q in queries[:WARM_UP]:  # lazy imports and first-call caches
        for call in calls.values():
            call(q)
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for i, q in enumerate(queries):
            shift = (round_ + i) % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                calls[name](q)
                times[name].append(time.perf_counter() - start)
    return times


async def ainterleaved(
    calls: dict[str, Callable[[str], Awaitable[Any]]], queries: list[str], repeats: int
) -> dict[str, list[float]]:
    """``interleaved`` for coroutines, inside one event loop."""
    for q in queries[:WARM_UP]:
        for call in calls.values():
            await call(q)
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for i, q in enumerate(queries):
            shift = (round_ + i) % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                await calls[name](q)
                times[name].append(time.perf_counter() - start)
    return times


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
        {"gate": gate.decide, "selector": lambda q: selector.select(choices, q), "by hand": by_hand,
         "router": router.query},
        queries, repeats,
    )
    async_ = asyncio.run(ainterleaved(
        {"gate": gate.adecide, "selector": lambda q: selector.aselect(choices, q), "by hand": aby_hand,
         "router": router.aquery},
        queries, repeats,
    ))
    return {"sync": _paired(sync), "async": _paired(async_), "retrieval_rate": float(np.mean([
        gate.decide(q).retrieve for q in queries]))}


def _paired(times: dict[str, list[float]]) -> dict[str, Any]:
    out = {name: percentiles(values) for name, values in times.items()}
    out["selector - gate"] = percentiles(np.asarray(times["selector"]) - np.asarray(times["gate"]))
    out["router - by hand"] = percentiles(np.asarray(times["router"]) - np.asarray(times["by hand"]))
    return out


def selector_report(result: dict[str, Any]) -> str:
    """The selector section as markdown."""
    rows = [
        [mode, name, r["median_ms"], r["p90_ms"]]
        for mode in ("sync", "async")
        for name, r in result[mode].items()
    ]
    s, a = result["sync"]["router - by hand"], result["async"]["router - by hand"]
    return "\n".join([
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
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(parser)
    parser.add_argument("--repeats", type=int, default=20, help="rounds over the questions")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    logging.basicConfig(level=logging.WARNING)

    gate, queries = build(args.data)
    selector = {**selector_overhead(gate, queries, args.repeats), "repeats": args.repeats}
    result = {
        "threads": torch.get_num_threads(), "llama_index_core": llama_index_core_version,
        "python": platform.python_version(), "selector": selector,
    }
    markdown = "\n".join([
        "# LlamaIndex overhead",
        "",
        f"torch threads {result['threads']}, llama-index-core {result['llama_index_core']},"
        f" Python {result['python']}.",
        "",
        selector_report(selector),
    ])
    print(markdown)
    md, js = write_results("llamaindex_overhead", markdown, result)
    print(f"\nwrote {md} and {js}")


if __name__ == "__main__":
    main()
