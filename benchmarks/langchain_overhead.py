"""What ``gated_router`` costs on top of the gate it wraps.

An ``SKRKnnGate`` (k=10) is fitted on the NQ outcome records of AdaRAGUE (500 real
questions, MiniLM); the queries are 200 held-out SQuAD questions. Every question's
embedding is computed once up front and served from a table (``CachedEmbedder``), so
the gate's own work (a table lookup and a faiss search over 500 vectors) is small and
stable, and what is left is LangChain's part.

1. Overhead, sync and async: per question, interleaved, order rotated each round,
   ``--repeats`` rounds over the 200 questions:
   - ``gate.decide(q)`` / ``await gate.adecide(q)``: the gate alone;
   - ``GateRunnable.invoke`` / ``ainvoke``: the gate as a runnable (config, callback
     managers, the decision's custom event);
   - ``router.invoke`` / ``ainvoke``: the whole router with trivial branches
     (``RunnableLambda`` returning the question, with an async twin);
   - ``bare_router.invoke`` / ``ainvoke``: the router a user would write by hand, a
     ``RunnableLambda`` that calls the gate and returns the branch to run (LangChain's
     routing form, no events, tags or metadata), over the same branches;
   - ``branch_router.invoke`` / ``ainvoke``: LangChain's own branch, a bare
     ``RunnableBranch`` whose condition (a ``RunnableLambda`` with an async twin) calls
     the gate, over the same branches.
   The router's overhead is the paired difference router - gate of each question in
   each round; its median and p90 are reported (goal: under 1 ms), beside the bare
   routers' overheads measured in the same rounds and the ratios of the medians
   (goal: within 1.3 times the bare ``RunnableBranch``'s).
2. Throughput: the same router over the 200 questions by ``abatch``, by ``batch``
   and by a sequential loop of ``invoke``, rotated, ``--repeats`` rounds; once with
   the cached embeddings and once with MiniLM embedding live (where deciding a batch
   in one ``decide_batch`` call pays off most).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/langchain_overhead.py [--data DIR] [--repeats 20]

Needs ``langchain-adaptive-gates`` (integrations/langchain) importable. Writes
benchmarks/results/langchain_overhead.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
from collections.abc import Callable
from typing import Any

import langchain_core
import numpy as np
import torch
from langchain_core.runnables import Runnable, RunnableBranch, RunnableLambda

from _common import (
    add_data_argument,
    ainterleaved,
    interleaved,
    markdown_table,
    overhead_gates,
    percentiles,
    write_results,
)
from adaptive_gates import SKRKnnGate
from langchain_adaptive_gates import GateRunnable, gated_router

K = 10
QUERIES = 200
GOAL_MS = 1.0
#: The router's overhead may be at most this many times the bare ``RunnableBranch``'s.
GOAL_RATIO = 1.3


def identity(question: str) -> str:
    return question


async def aidentity(question: str) -> str:
    return question


def router_of(gate: SKRKnnGate) -> Runnable:
    """The router with trivial branches, native on both paths (the overhead measured
    includes running them)."""
    branch = RunnableLambda(identity, afunc=aidentity)
    return gated_router(gate, direct=branch, retrieval=branch)


def bare_router_of(gate: SKRKnnGate) -> Runnable:
    """The same routing written by hand: a ``RunnableLambda`` deciding and returning the
    branch, which LangChain then runs (the baseline of the router's overhead)."""
    branch = RunnableLambda(identity, afunc=aidentity)

    def choose(question: str) -> Runnable:
        gate.decide(question)
        return branch

    async def achoose(question: str) -> Runnable:
        await gate.adecide(question)
        return branch

    return RunnableLambda(choose, afunc=achoose)


def branch_router_of(gate: SKRKnnGate) -> Runnable:
    """The same routing in LangChain's own branch: a ``RunnableBranch`` whose condition
    calls the gate (the baseline the router's overhead is held to)."""
    branch = RunnableLambda(identity, afunc=aidentity)

    def retrieves(question: str) -> bool:
        return gate.decide(question).retrieve

    async def aretrieves(question: str) -> bool:
        return (await gate.adecide(question)).retrieve

    return RunnableBranch((RunnableLambda(retrieves, afunc=aretrieves), branch), branch)


def overhead_sync(gate: SKRKnnGate, queries: list[str], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of the gate, its runnable, the router and the bare routers, interleaved."""
    runnables = {"gate_runnable": GateRunnable(gate), **routers_of(gate)}
    calls = {"gate": gate.decide, **{name: r.invoke for name, r in runnables.items()}}
    return interleaved(calls, queries, repeats)


async def overhead_async(gate: SKRKnnGate, queries: list[str], repeats: int) -> dict[str, list[float]]:
    """``overhead_sync`` through ``adecide`` / ``ainvoke`` inside one event loop."""
    runnables = {"gate_runnable": GateRunnable(gate), **routers_of(gate)}
    calls = {"gate": gate.adecide, **{name: r.ainvoke for name, r in runnables.items()}}
    return await ainterleaved(calls, queries, repeats)


def routers_of(gate: SKRKnnGate) -> dict[str, Runnable]:
    """The router and the two bare routers it is compared with."""
    return {"router": router_of(gate), "bare_router": bare_router_of(gate), "branch_router": branch_router_of(gate)}


def summarise(times: dict[str, list[float]]) -> dict[str, Any]:
    """Each variant's median/p90 and the router's paired overhead over the gate."""
    out = {name: percentiles(values) for name, values in times.items()}
    gate = np.asarray(times["gate"])
    out["runnable_overhead"] = percentiles(list(np.asarray(times["gate_runnable"]) - gate))
    out["router_overhead"] = percentiles(list(np.asarray(times["router"]) - gate))
    out["bare_router_overhead"] = percentiles(list(np.asarray(times["bare_router"]) - gate))
    out["branch_router_overhead"] = percentiles(list(np.asarray(times["branch_router"]) - gate))
    out["overhead_ratio"] = out["router_overhead"]["median_ms"] / out["bare_router_overhead"]["median_ms"]
    out["branch_overhead_ratio"] = out["router_overhead"]["median_ms"] / out["branch_router_overhead"]["median_ms"]
    return out


def throughput(router: Runnable, queries: list[str], repeats: int) -> dict[str, dict[str, float]]:
    """Questions per second of ``abatch``, ``batch`` and a sequential ``invoke`` loop."""
    modes: dict[str, Callable[[], Any]] = {
        "abatch": lambda: asyncio.run(router.abatch(queries)),
        "batch": lambda: router.batch(queries),
        "sequential invoke": lambda: [router.invoke(q) for q in queries],
    }
    modes["abatch"]()  # warm-up
    seconds = interleaved(
        {name: lambda _, call=call: call() for name, call in modes.items()}, [None], repeats, warm_up=0
    )
    return {
        name: {"median_s": float(np.median(s)), "questions_per_s": len(queries) / float(np.median(s)), "rounds": len(s)}
        for name, s in seconds.items()
    }


def report(result: dict[str, Any]) -> str:
    """The results as markdown."""
    rows = []
    for mode in ("sync", "async"):
        r = result[mode]
        for name, label in (
            ("gate", "gate alone (decide / adecide)"),
            ("gate_runnable", "GateRunnable (invoke / ainvoke)"),
            ("router", "gated_router (invoke / ainvoke)"),
            ("bare_router", "bare RunnableLambda router (invoke / ainvoke)"),
            ("branch_router", "bare RunnableBranch (invoke / ainvoke)"),
            ("runnable_overhead", "GateRunnable - gate (paired)"),
            ("router_overhead", "**router - gate (paired)**"),
            ("bare_router_overhead", "bare router - gate (paired)"),
            ("branch_router_overhead", "bare RunnableBranch - gate (paired)"),
        ):
            rows.append([mode, label, r[name]["median_ms"], r[name]["p90_ms"]])
    tput = []
    for embedding in ("cached", "live"):
        for name, t in result["throughput"][embedding].items():
            tput.append([embedding, name, t["median_s"], t["questions_per_s"]])
    s, a = result["sync"]["router_overhead"], result["async"]["router_overhead"]
    bare_s, bare_a = result["sync"]["bare_router_overhead"], result["async"]["bare_router_overhead"]
    branch_s, branch_a = result["sync"]["branch_router_overhead"], result["async"]["branch_router_overhead"]
    return "\n".join(
        [
            "# gated_router overhead",
            "",
            f"SKRKnnGate (k={K}) fitted on AdaRAGUE NQ (500 questions), {QUERIES} held-out SQuAD questions, "
            f"every embedding precomputed; {result['repeats']} rounds, calls interleaved and rotated."
            f" torch threads {result['threads']},"
            f" langchain-core {result['langchain_core']}, Python {result['python']}. Milliseconds per call.",
            "",
            markdown_table(["mode", "call", "median ms", "p90 ms"], rows),
            "",
            f"The router adds {s['median_ms']:.3f} ms (median; p90 {s['p90_ms']:.3f}) to a synchronous invocation and"
            f" {a['median_ms']:.3f} ms (p90 {a['p90_ms']:.3f}) to an asynchronous one, beyond the gate's own work"
            f" (goal: under {GOAL_MS:g} ms). A bare `RunnableLambda` router doing the same routing by hand adds"
            f" {bare_s['median_ms']:.3f} / {bare_a['median_ms']:.3f} ms"
            f" in the same rounds: the router's overhead is {result['sync']['overhead_ratio']:.2f}x (sync) and"
            f" {result['async']['overhead_ratio']:.2f}x (async) the bare router's. LangChain's own `RunnableBranch`"
            f" with the gate as its condition adds {branch_s['median_ms']:.3f} / {branch_a['median_ms']:.3f} ms:"
            f" the router's overhead is {result['sync']['branch_overhead_ratio']:.2f}x (sync) and"
            f" {result['async']['branch_overhead_ratio']:.2f}x (async) the branch's (goal: within {GOAL_RATIO:g}x).",
            "",
            f"## Throughput over {QUERIES} questions (trivial branches)",
            "",
            markdown_table(["embeddings", "mode", "median s", "questions/s"], tput),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(parser)
    parser.add_argument("--repeats", type=int, default=20, help="rounds over the questions (overhead)")
    parser.add_argument("--throughput-repeats", type=int, default=5, help="rounds of each throughput mode")
    args = parser.parse_args()
    if args.repeats < 1 or args.throughput_repeats < 1:
        parser.error("--repeats and --throughput-repeats must be at least 1")
    logging.basicConfig(level=logging.WARNING)

    gate, live_gate, queries = overhead_gates(args.data, k=K, queries=QUERIES)
    sync = summarise(overhead_sync(gate, queries, args.repeats))
    async_ = summarise(asyncio.run(overhead_async(gate, queries, args.repeats)))
    cached = throughput(router_of(gate), queries, args.throughput_repeats)
    live = throughput(router_of(live_gate), queries, args.throughput_repeats)
    result = {
        "gate": f"SKRKnnGate(k={K})",
        "memory": len(gate.memory_),
        "queries": len(queries),
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "langchain_core": langchain_core.__version__,
        "python": platform.python_version(),
        "sync": sync,
        "async": async_,
        "throughput": {"cached": cached, "live": live},
    }
    markdown = report(result)
    print(markdown)
    md, js = write_results("langchain_overhead", markdown, result)
    print(f"\nwrote {md} and {js}")


if __name__ == "__main__":
    main()
