"""Latency and throughput of ``SKRKnnGate`` (k=10) with a 100,000-question memory.

The memory holds the ~15k real questions of the shared data (AdaRAGUE splits,
NQ-open dev, HotpotQA dev, SKR TemporalQA, TruthfulQA), embedded once with
MiniLM, topped up to 100,000 with small random perturbations of their
embeddings (normalised; keyed as unique synthetic texts). Labels are random:
they do not affect the cost. Two held-out sets of real questions are kept out
of the memory.

1. Decision latency beyond the embedding: 500 queries whose embeddings are
   precomputed, so an embedder that only looks them up stands behind the gate.
   ``gate.decide(q)`` per question, the memory's ``search`` and a bare faiss
   ``IndexFlatIP.search`` on the same vectors, measured interleaved, plus
   ``gate.score`` and bare faiss on batches of 64, each also with faiss's
   brute-force search forced onto its BLAS path (``distance_compute_blas_threshold``).
2. Throughput with embedding: ``gate.decide_batch`` on 1,000 questions embedded
   live by MiniLM, at batch sizes 1, 16, 64 and 256, interleaved batch by batch
   with the embedder alone, so the gate's own share is visible.

3. Embedding backends: ``SKRKnnGate`` (k=10) fitted on AdaRAGUE NQ's 500 outcome
   records with the torch embedder (``default_embedder("torch")``), saved, and loaded
   again with the ONNX one (``default_embedder("onnx")``); ``decide`` on 500 NQ-open
   dev questions through each, and each embedder alone, interleaved call by call:
   the decision's median including the embedding, the embedding's share of it, how
   many decisions are identical and the least cosine between the two embeddings.

All run with ``--threads`` torch, onnxruntime and faiss threads (default 1). First, a thread
check times single-question embedding and faiss search with 1 thread and with
the machine's default, interleaved: on a shared machine whose cores are busy,
multi-threaded torch and faiss stall on descheduled threads.

    .venv/bin/python benchmarks/skr_latency.py [--data DIR] [--repeats 3] [--threads 1]

Writes benchmarks/results/skr_latency.{md,json}.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from tqdm import tqdm

from _common import ADARAGUE_SPLITS, adarague_path, add_data_argument, markdown_table, write_results
from adaptive_gates import SKRKnnGate, load_outcomes, load_qa
from adaptive_gates.memory.memories import l2_normalise
from adaptive_gates.models.defaults import default_embedder
from adaptive_gates.models.embedding.cached import CachedEmbedder
from adaptive_gates.models.embedding.onnx.embedder import OnnxEmbedder
from adaptive_gates.models.protocols import Embedder

MEMORY_SIZE = 100_000
K = 10
QUERIES = 500
THROUGHPUT_QUESTIONS = 1000
BATCH_SIZES = (1, 16, 64, 256)
SCORE_BATCH = 64
NOISE = 0.025  # per-dimension std of the perturbation: cosine ~0.9 to its source
UNKNOWN_SHARE = 0.25
EXTRA_FILES = ("nq_open_dev.jsonl", "hotpotqa_dev_qa_only.jsonl", "skr_temporal_train.jsonl", "truthfulqa.jsonl")
THREAD_CHECK_QUESTIONS = 100
BATCH_PASSES = 5
BACKEND_QUESTIONS = 500
SEED = 0


def real_questions(data: Path) -> list[str]:
    """The distinct real questions of the shared data, in file order."""
    questions = [r.question for split in ADARAGUE_SPLITS for r in load_outcomes(adarague_path(data, split))]
    questions += [r.question for name in EXTRA_FILES for r in load_qa(data / name)]
    return list(dict.fromkeys(questions))


def build_gate(
    questions: list[str], vectors: np.ndarray, embedder: CachedEmbedder, rng: np.random.Generator
) -> SKRKnnGate:
    """A kNN gate whose memory is ``questions`` plus perturbed copies, MEMORY_SIZE in all."""
    source = rng.integers(0, len(questions), MEMORY_SIZE - len(questions))
    synthetic = l2_normalise(vectors[source] + rng.normal(0.0, NOISE, (source.size, vectors.shape[1])))
    synthetic_texts = [f"{questions[i]} [synthetic #{j}]" for j, i in enumerate(source)]
    embedder.store(synthetic_texts, synthetic)
    labels = (rng.random(MEMORY_SIZE) < UNKNOWN_SHARE).astype(int).tolist()
    return SKRKnnGate(embedder, k=K).fit(questions + synthetic_texts, labels)


def timed(fn: Callable[[], Any]) -> float:
    """Wall time of one call, in milliseconds."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def summary(ms: list[float], per: int = 1) -> dict[str, float]:
    """Median and p90 of per-question milliseconds (``per`` questions per call)."""
    values = np.asarray(ms) / per
    return {"median_ms": float(np.median(values)), "p90_ms": float(np.percentile(values, 90)), "calls": len(ms)}


def set_threads(n: int) -> None:
    """Threads of torch (the embedder) and of faiss's OpenMP loops."""
    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def thread_check(
    embedder: Embedder, index: faiss.Index, questions: list[str], vectors: np.ndarray, thread_counts: tuple[int, ...]
) -> dict[str, dict[str, float]]:
    """Single-question embedding and bare faiss search (of the question's
    precomputed vector) at each thread count, interleaved question by question."""
    times: dict[str, list[float]] = {
        f"{what}, {n} thread(s)": [] for what in ("embed", "faiss search") for n in thread_counts
    }
    normalised = l2_normalise(vectors)
    for i, question in enumerate(tqdm(questions, desc="thread check")):
        for n in thread_counts[i % len(thread_counts) :] + thread_counts[: i % len(thread_counts)]:
            set_threads(n)
            times[f"embed, {n} thread(s)"].append(timed(lambda: embedder.embed([question])))
            times[f"faiss search, {n} thread(s)"].append(timed(lambda: index.search(normalised[i : i + 1], K)))
    return {name: summary(ms) for name, ms in times.items()}


def with_blas(fn: Callable[[int], Any]) -> Callable[[int], Any]:
    """``fn`` run with faiss's brute-force search on its BLAS path for batches of at
    least 20 queries (faiss's old default; the installed one may be far higher)."""

    def run(s: int) -> Any:
        default = faiss.cvar.distance_compute_blas_threshold
        faiss.cvar.distance_compute_blas_threshold = 20
        try:
            return fn(s)
        finally:
            faiss.cvar.distance_compute_blas_threshold = default

    return run


def decision_latency(
    gate: SKRKnnGate, index: faiss.Index, queries: list[str], query_vectors: np.ndarray
) -> dict[str, Any]:
    """Per-question cost beyond the embedding: the gate, its memory search, bare faiss."""
    normalised = l2_normalise(query_vectors)
    single: dict[str, Callable[[int], Any]] = {
        "gate.decide (1 question)": lambda i: gate.decide(queries[i]),
        "memory.search (1 question)": lambda i: gate.memory_.search(query_vectors[i : i + 1], K),
        "faiss IndexFlatIP.search (1 question)": lambda i: index.search(normalised[i : i + 1], K),
    }
    for i in range(20):  # warm-up
        for fn in single.values():
            fn(i)
    times: dict[str, list[float]] = {name: [] for name in single}
    for i in tqdm(range(len(queries)), desc="single-question latency"):
        names = list(single)
        for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate the order
            times[name].append(timed(lambda: single[name](i)))
    out = {name: summary(ms) for name, ms in times.items()}

    def gate_batch(s: int) -> Any:
        return gate.score(queries[s : s + SCORE_BATCH])

    def faiss_batch(s: int) -> Any:
        return index.search(normalised[s : s + SCORE_BATCH], K)

    batched: dict[str, Callable[[int], Any]] = {
        f"gate.score (batch {SCORE_BATCH}, per question)": gate_batch,
        f"faiss IndexFlatIP.search (batch {SCORE_BATCH}, per question)": faiss_batch,
        f"gate.score (batch {SCORE_BATCH}, per question), faiss BLAS path": with_blas(gate_batch),
        f"faiss IndexFlatIP.search (batch {SCORE_BATCH}, per question), faiss BLAS path": with_blas(faiss_batch),
    }
    names = list(batched)
    batch_times: dict[str, list[float]] = {name: [] for name in batched}
    starts = range(0, len(queries) - SCORE_BATCH + 1, SCORE_BATCH)
    for p in tqdm(range(BATCH_PASSES), desc=f"batch-{SCORE_BATCH} latency"):
        for j, s in enumerate(starts):
            r = (p + j) % len(names)
            for name in names[r:] + names[:r]:  # rotate the order
                batch_times[name].append(timed(lambda: batched[name](s)))
    out.update({name: summary(ms, SCORE_BATCH) for name, ms in batch_times.items()})
    return out


def throughput(gate: SKRKnnGate, embedder: CachedEmbedder, questions: list[str], repeats: int) -> list[dict[str, Any]]:
    """The embedder alone and ``gate.decide_batch`` (embedding live), interleaved
    batch by batch so both see the same machine load. Questions/s: the median over
    ``repeats`` passes; the gate's extra time: the median over paired batches."""
    if any(q in embedder for q in questions):
        raise ValueError("throughput questions must be embedded live, not looked up")
    rows = []
    for size in tqdm(BATCH_SIZES, desc="throughput"):
        batches = [questions[s : s + size] for s in range(0, len(questions), size)]
        gate.decide_batch(batches[0])  # warm-up
        passes: dict[str, list[float]] = {"embedder": [], "gate": []}
        extra_ms: list[float] = []  # per question, gate minus embedder on the same batch
        for _ in range(repeats):
            total = {"embedder": 0.0, "gate": 0.0}
            for j, batch in enumerate(tqdm(batches, desc=f"batch size {size}", leave=False)):
                calls = [("embedder", lambda: embedder.inner.embed(batch)), ("gate", lambda: gate.decide_batch(batch))]
                ms = {name: timed(fn) for name, fn in (calls if j % 2 == 0 else calls[::-1])}
                total = {name: total[name] + ms[name] for name in total}
                extra_ms.append((ms["gate"] - ms["embedder"]) / len(batch))
            for name, ms_total in total.items():
                passes[name].append(len(questions) / (ms_total / 1000))
        embed_qps, gate_qps = (float(np.median(passes[name])) for name in ("embedder", "gate"))
        rows.append(
            {
                "batch_size": size,
                "embedder_qps": embed_qps,
                "gate_qps": gate_qps,
                "gate_extra_ms_per_question": float(np.median(extra_ms)),
                "gate_share": 1.0 - gate_qps / embed_qps,  # of the gate's time, spent beyond embedding
                "passes_qps": passes,
            }
        )
    return rows


def backend_comparison(data: Path) -> dict[str, Any]:
    """Torch vs ONNX embedding behind one saved gate, interleaved call by call (section 3)."""
    torch_embedder, onnx_embedder = default_embedder("torch"), default_embedder("onnx")
    if not isinstance(onnx_embedder, OnnxEmbedder) or onnx_embedder.backend != "onnx":
        raise RuntimeError("the ONNX embedder fell back to torch; see the logged warning")
    memory = load_outcomes(adarague_path(data, "nq"))
    asked = list(dict.fromkeys(r.question for r in load_qa(data / "nq_open_dev.jsonl")))[:BACKEND_QUESTIONS]
    torch_gate = SKRKnnGate(torch_embedder, k=K).fit_outcomes(memory)
    with tempfile.TemporaryDirectory() as folder:
        torch_gate.save(Path(folder) / "gate")
        onnx_gate = SKRKnnGate.load(Path(folder) / "gate", embedder=onnx_embedder)
    calls: dict[str, Callable[[str], Any]] = {
        "gate.decide, torch embedding": torch_gate.decide,
        "gate.decide, ONNX embedding": onnx_gate.decide,
        "embed alone, torch": lambda q: torch_embedder.embed([q]),
        "embed alone, ONNX": lambda q: onnx_embedder.embed([q]),
    }
    for question in asked[:20]:  # warm-up
        for fn in calls.values():
            fn(question)
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for i, question in enumerate(tqdm(asked, desc="torch vs ONNX")):
        for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate the order
            times[name].append(timed(lambda: calls[name](question)))
    same = sum(a.retrieve == b.retrieve for a, b in zip(torch_gate.decide_batch(asked), onnx_gate.decide_batch(asked)))
    cosines = (torch_embedder.embed(asked) * onnx_embedder.embed(asked)).sum(axis=1)
    timing = {name: summary(ms) for name, ms in times.items()}
    shares = {
        backend: timing[f"embed alone, {backend}"]["median_ms"]
        / timing[f"gate.decide, {backend} embedding"]["median_ms"]
        for backend in ("torch", "ONNX")
    }
    return {
        "memory": f"AdaRAGUE NQ train outcome records ({len(memory)})",
        "questions": len(asked),
        "timing": timing,
        "embedding_share": shares,
        "identical_decisions": int(same),
        "min_cosine": float(cosines.min()),
    }


def render_backends(backends: dict[str, Any]) -> str:
    rows = [[name, r["median_ms"], r["p90_ms"], r["calls"]] for name, r in backends["timing"].items()]
    table = markdown_table(["single question", "median ms", "p90 ms", "calls"], rows)
    shares = ", ".join(f"{name} {100 * share:.0f}%" for name, share in backends["embedding_share"].items())
    n = backends["questions"]
    return (
        f"## Embedding backends: torch vs ONNX ({n} NQ-open dev questions, memory: {backends['memory']}, "
        "gate fitted and saved with torch, loaded with ONNX; interleaved call by call)\n\n"
        + table
        + f"\n\nThe embedding's share of the decision (medians): {shares}. "
        f"Identical decisions: {backends['identical_decisions']}/{n}. "
        f"Least cosine between the two embeddings: {backends['min_cosine']:.7f}."
    )


def render(results: dict[str, Any]) -> str:
    env = results["environment"]
    threads = markdown_table(
        ["single question", "median ms", "p90 ms", "calls"],
        [[name, r["median_ms"], r["p90_ms"], r["calls"]] for name, r in results["thread_check"].items()],
    )
    latency = markdown_table(
        ["what (embedding excluded)", "median ms / question", "p90 ms / question", "calls"],
        [[name, r["median_ms"], r["p90_ms"], r["calls"]] for name, r in results["latency"].items()],
    )
    rates = markdown_table(
        [
            "batch size",
            "embedder alone (q/s)",
            "gate.decide_batch (q/s)",
            "gate's extra ms / question",
            "gate's share of its time",
        ],
        [
            [
                r["batch_size"],
                f"{r['embedder_qps']:.1f}",
                f"{r['gate_qps']:.1f}",
                f"{r['gate_extra_ms_per_question']:.2f}",
                f"{100 * r['gate_share']:.0f}%",
            ]
            for r in results["throughput"]
        ],
    )
    return "\n\n".join(
        [
            f"# SKRKnnGate (k={K}) latency with a {results['memory_size']:,}-question memory",
            f"Memory: {results['real_in_memory']:,} real questions + perturbed copies; encoder {results['encoder']}. "
            f"Machine: {env['cpus']} CPUs, load average {env['load_average']:.2f} at start "
            f"({env['load_average_end']:.2f} at the end; the machine is shared), "
            f"default threads: faiss {env['faiss_threads']}, torch {env['torch_threads']}; "
            f"the measurements below the thread check use {env['threads_used']}. "
            f"faiss {env['faiss_version']}, distance_compute_blas_threshold {env['faiss_blas_threshold']:,}.",
            f"## Thread check ({THREAD_CHECK_QUESTIONS} questions, 1 thread vs the default, interleaved)\n\n" + threads,
            f"## Decision latency beyond the embedding ({QUERIES} held-out queries, precomputed embeddings)\n\n"
            + latency,
            f"## Throughput with live MiniLM embedding ({THROUGHPUT_QUESTIONS:,} held-out questions, "
            f"median of {results['repeats']} passes)\n\n" + rates,
            render_backends(results["backends"]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--repeats", type=int, default=3, help="throughput passes over the questions (default: 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch and faiss threads (default: 1)")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # onnxruntime's threads follow it (fixed per session)
    logging.basicConfig(level=logging.WARNING)
    environment = {
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "faiss_threads": faiss.omp_get_max_threads(),
        "torch_threads": torch.get_num_threads(),
        "threads_used": args.threads,
        "faiss_version": faiss.__version__,
        "faiss_blas_threshold": faiss.cvar.distance_compute_blas_threshold,
    }
    defaults = tuple(sorted({1, environment["faiss_threads"], environment["torch_threads"]}))
    set_threads(args.threads)

    rng = np.random.default_rng(SEED)
    distinct = real_questions(args.data)
    questions = [distinct[i] for i in rng.permutation(len(distinct))]
    queries = questions[:QUERIES]
    live = questions[QUERIES : QUERIES + THROUGHPUT_QUESTIONS]
    memory_questions = questions[QUERIES + THROUGHPUT_QUESTIONS :]

    embedder = CachedEmbedder(default_embedder(), memoise=False)
    print(f"embedding {QUERIES + len(memory_questions):,} real questions once ...")
    vectors = embedder.inner.embed(queries + memory_questions)
    embedder.store(queries + memory_questions, vectors)
    gate = build_gate(memory_questions, vectors[QUERIES:], embedder, rng)
    index = faiss.IndexFlatIP(embedder.dimension)  # bare faiss on the same vectors, for comparison
    index.add(gate.memory_.entries()[0])

    checked = thread_check(
        embedder.inner, index, queries[:THREAD_CHECK_QUESTIONS], vectors[:THREAD_CHECK_QUESTIONS], defaults
    )
    set_threads(args.threads)
    results = {
        "memory_size": len(gate.memory_),
        "real_in_memory": len(memory_questions),
        "encoder": embedder.model_id,
        "k": K,
        "repeats": args.repeats,
        "environment": environment,
        "thread_check": checked,
        "latency": decision_latency(gate, index, queries, vectors[:QUERIES]),
        "throughput": throughput(gate, embedder, live, args.repeats),
        "backends": backend_comparison(args.data),
    }
    environment["load_average_end"] = os.getloadavg()[0]
    markdown = render(results)
    print(markdown)
    for path in write_results("skr_latency", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
