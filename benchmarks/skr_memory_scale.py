"""The SKR memory at scale: exact vs approximate (HNSW, IVF) faiss search.

Memories of 10,000 and 100,000 real texts embedded by MiniLM: the distinct real
questions of the shared data (AdaRAGUE splits, NQ-open, HotpotQA, TemporalQA,
TruthfulQA, StrategyQA, CommonsenseQA, BoolQ) minus 1,000 held-out queries, and for
100,000 topped up with real Wikipedia sentences of the shared corpus. Vectors are
embedded once and cached under ``cache_dir()/benchmarks`` (never in the repository).

For each size: the exact ``IndexFlatIP`` and each approximate index over a grid of
search settings (HNSW ``efSearch``, IVF ``nprobe``), measured through the memory's
``search`` with one query at a time (the gate's own path, embedding excluded):
median and p90 ms per decision-time search, recall@10 against the exact index on the
held-out queries, and build time. Also ``SKRKnnGate.decide`` on the chosen default.

    .venv/bin/python benchmarks/skr_memory_scale.py [--data DIR] [--threads 1]

Writes benchmarks/results/skr_memory_scale.{md,json,png}.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from _common import ADARAGUE_SPLITS, RESULTS, adarague_path, add_data_argument, markdown_table, write_results
from adaptive_gates import FaissMemory, SKRKnnGate, load_corpus, load_outcomes, load_qa
from adaptive_gates.models import cache_dir
from adaptive_gates.models.embedding.cached import CachedEmbedder
from adaptive_gates.models.protocols import Embedder

logger = logging.getLogger("skr_memory_scale")

QUESTION_FILES = (
    "nq_open_dev.jsonl",
    "hotpotqa_dev_qa_only.jsonl",
    "skr_temporal_train.jsonl",
    "truthfulqa.jsonl",
    "strategyqa_train.jsonl",
    "strategyqa_dev.jsonl",
    "commonsenseqa_dev.jsonl",
    "boolq_dev.jsonl",
)
CORPUS_FILE = "wiki_paragraph_corpus.jsonl"
SIZES = (10_000, 100_000)
QUERIES = 1000
K = 10
UNKNOWN_SHARE = 0.25
EMBED_BATCH = 256
SEED = 0
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def real_questions(data: Path) -> list[str]:
    """The distinct real questions of the shared data, in file order."""
    questions = [r.question for split in ADARAGUE_SPLITS for r in load_outcomes(adarague_path(data, split))]
    questions += [r.question for name in QUESTION_FILES for r in load_qa(data / name)]
    return list(dict.fromkeys(q.strip() for q in questions if q.strip()))


def wiki_sentences(data: Path, exclude: set[str]) -> list[str]:
    """Distinct sentences of 6 to 40 words from the shared Wikipedia corpus, in file order."""
    sentences = (s.strip() for record in load_corpus(data / CORPUS_FILE) for s in _SENTENCE_END.split(record.text))
    return [s for s in dict.fromkeys(sentences) if 6 <= len(s.split()) <= 40 and s not in exclude]


def cached_embeddings(texts: list[str], embedder: Embedder, name: str) -> np.ndarray:
    """``embedder``'s vectors of ``texts``, computed once and kept in the cache folder
    under a key of the model and the texts."""
    key = hashlib.sha256("\n".join([embedder.model_id, *texts]).encode("utf-8")).hexdigest()[:16]
    path = cache_dir() / "benchmarks" / f"{name}-{key}.npy"
    if path.is_file():
        vectors = np.load(path, allow_pickle=False)
        if vectors.shape == (len(texts), embedder.dimension):
            return vectors
    logger.warning("embedding %d texts into %s (once) ...", len(texts), path)
    parts = [
        np.asarray(embedder.embed(texts[s : s + EMBED_BATCH]), dtype=np.float32)
        for s in tqdm(range(0, len(texts), EMBED_BATCH), desc=f"embedding {name}")
    ]
    vectors = np.concatenate(parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors, allow_pickle=False)
    return vectors


def benchmark_texts(data: Path) -> tuple[list[str], list[str], list[str]]:
    """Held-out query questions, memory questions, and Wikipedia sentences to fill up to
    the largest size."""
    rng = np.random.default_rng(SEED)
    distinct = real_questions(data)
    questions = [distinct[i] for i in rng.permutation(len(distinct))]
    queries, memory_questions = questions[:QUERIES], questions[QUERIES:]
    sentences = wiki_sentences(data, set(distinct))
    filler = [sentences[i] for i in sorted(rng.permutation(len(sentences))[: max(SIZES) - len(memory_questions)])]
    return queries, memory_questions, filler


HNSW_M = (16, 32)
EF_SEARCH = (16, 32, 64, 128)
NPROBE = (4, 8, 16, 32, 64)
WARM_UP = 20
GOAL_MS, GOAL_RECALL = 1.0, 0.95
Config = tuple[FaissMemory, dict[str, int]]  # a memory and the search settings to time it with


def timed_ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def interleaved_ms(configs: list[Config], queries: np.ndarray) -> list[dict[str, float]]:
    """Median and p90 ms of each config's ``search`` on one query at a time: every query
    goes through every config in turn (order rotated), so all see the same machine load.
    A config's search settings are applied before its timed call."""

    def run(j: int, query: np.ndarray) -> float:
        memory, tune = configs[j]
        memory.set_search(**tune)
        return timed_ms(lambda: memory.search(query, K))

    for i in range(WARM_UP):
        for j in range(len(configs)):
            run(j, queries[i : i + 1])
    ms: list[list[float]] = [[] for _ in configs]
    for i in tqdm(range(len(queries)), desc="latency", leave=False):
        r = i % len(configs)
        for j in [*range(r, len(configs)), *range(r)]:
            ms[j].append(run(j, queries[i : i + 1]))
    return [{"median_ms": float(np.median(m)), "p90_ms": float(np.percentile(m, 90))} for m in ms]


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / truth.shape[1] for f, t in zip(found, truth)]))


def filled_memory(
    vectors: np.ndarray, labels: list[int], texts: list[str], **settings: Any
) -> tuple[FaissMemory, float]:
    """A FaissMemory holding ``vectors`` (one add, as a gate's fit does) and its build seconds."""
    memory = FaissMemory(vectors.shape[1], **settings)
    start = time.perf_counter()
    memory.add(vectors, labels, texts)
    return memory, time.perf_counter() - start


def measure_size(
    vectors: np.ndarray, texts: list[str], queries: list[str], query_vectors: np.ndarray, embedder: CachedEmbedder
) -> dict[str, Any]:
    """Every index over a memory of these rows: build seconds, recall@10 against the
    exact index, search latency (one query at a time, interleaved); then the gate with
    its default memory against the gate over an exact one."""
    size = len(texts)
    labels = (np.random.default_rng(SEED).random(size) < UNKNOWN_SHARE).astype(int).tolist()
    position = {t: i for i, t in enumerate(texts)}  # the texts are distinct

    def neighbours(memory: FaissMemory) -> np.ndarray:
        return np.array([[position[t] for t in hits] for hits in memory.search(query_vectors, K)[2]])

    exact, seconds = filled_memory(vectors, labels, texts, index="exact")
    truth = neighbours(exact)
    rows: list[dict[str, Any]] = [{"index": "exact", "setting": "IndexFlatIP", "build_s": seconds, "recall_at_10": 1.0}]
    configs: list[Config] = [(exact, {})]
    for m in tqdm(HNSW_M, desc=f"HNSW builds at {size:,}"):
        memory, seconds = filled_memory(vectors, labels, texts, index="hnsw", switch_at=0, hnsw_m=m)
        for ef in EF_SEARCH:
            memory.set_search(ef_search=ef)
            recall = recall_at_k(neighbours(memory), truth)
            rows.append(
                {"index": "hnsw", "setting": f"M={m}, efSearch={ef}", "build_s": seconds, "recall_at_10": recall}
            )
            configs.append((memory, {"ef_search": ef}))
    memory, seconds = filled_memory(vectors, labels, texts, index="ivf", switch_at=0)
    nlist = memory.index_description()["nlist"]
    for nprobe in NPROBE:
        memory.set_search(nprobe=nprobe)
        recall = recall_at_k(neighbours(memory), truth)
        rows.append(
            {"index": "ivf", "setting": f"nlist={nlist}, nprobe={nprobe}", "build_s": seconds, "recall_at_10": recall}
        )
        configs.append((memory, {"nprobe": nprobe}))
    for row, latency in zip(rows, interleaved_ms(configs, query_vectors)):
        row.update(latency)
    del configs, exact, memory

    embedder.store(texts, vectors)
    embedder.store(queries, query_vectors)
    start = time.perf_counter()
    gate = SKRKnnGate(embedder, k=K).fit(texts, labels)
    fit_s = time.perf_counter() - start
    exact_gate = SKRKnnGate(embedder, k=K, memory=FaissMemory.configured(index="exact")).fit(texts, labels)
    pairs = zip(gate.decide_batch(queries), exact_gate.decide_batch(queries))
    same = float(np.mean([a.retrieve == b.retrieve for a, b in pairs]))
    del exact_gate
    for q in queries[:WARM_UP]:
        gate.decide(q)
    ms = [timed_ms(lambda: gate.decide(q)) for q in queries]
    return {
        "size": size,
        "indexes": rows,
        "gate": {
            "index": gate.memory_.index_description(),
            "fit_s": fit_s,
            "decide_median_ms": float(np.median(ms)),
            "decide_p90_ms": float(np.percentile(ms, 90)),
            "same_decisions_as_exact": same,
        },
    }


def render(results: dict[str, Any]) -> str:
    env = results["environment"]
    parts = [
        f"# SKR memory at scale: exact vs approximate faiss search (k={K})",
        f"Memories of real MiniLM vectors: {results['real_questions']:,} distinct real questions of the shared data "
        f"(the 10,000-row memory holds only questions), topped up to 100,000 with real Wikipedia sentences of the "
        f"shared corpus; {QUERIES:,} held-out real questions as queries. Latency: one query at a time through "
        f"`FaissMemory.search` (embedding excluded), every query through every setting in turn; median and p90 "
        f"over the queries. Recall@10 against the exact index. Labels are random ({UNKNOWN_SHARE:.0%} unknown): "
        f"they change neither cost nor neighbours. Build: seconds for one `add` of all rows (as a gate's fit). "
        f"Machine: {env['cpus']} CPUs, load average {env['load_average']:.2f} at start, {env['threads']} thread(s), "
        f"faiss {env['faiss_version']}. Goal: median <= {GOAL_MS} ms at recall@10 >= {GOAL_RECALL}.",
    ]
    for size in results["sizes"]:
        table = markdown_table(
            ["index", "setting", "build s", "median ms", "p90 ms", "recall@10", "meets goal"],
            [
                [
                    r["index"],
                    r["setting"],
                    f"{r['build_s']:.1f}",
                    r["median_ms"],
                    r["p90_ms"],
                    r["recall_at_10"],
                    "yes" if r["median_ms"] <= GOAL_MS and r["recall_at_10"] >= GOAL_RECALL else "",
                ]
                for r in size["indexes"]
            ],
        )
        gate = size["gate"]
        settings = gate["index"]["settings"]
        parts.append(
            f"## {size['size']:,} remembered questions\n\n{table}\n\n"
            f"`SKRKnnGate(k={K})` with the default memory (`index={settings['index']!r}`, switch at "
            f"{settings['switch_at']:,} rows, M={settings['hnsw_m']}, efSearch={settings['ef_search']}) searched "
            f"**{gate['index']['structure']}**: fit {gate['fit_s']:.1f} s; `gate.decide` beyond the embedding: median "
            f"{gate['decide_median_ms']:.3f} ms, p90 {gate['decide_p90_ms']:.3f} ms; the same decision as the gate "
            f"over the exact index on {gate['same_decisions_as_exact']:.1%} of the queries."
        )
    parts.append("![recall@10 against latency](skr_memory_scale.png)")
    return "\n\n".join(parts)


def plot(results: dict[str, Any], path: Path) -> None:
    """Recall@10 against median latency, one panel per memory size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results["sizes"]), figsize=(11, 4.2), sharey=True)
    for ax, size in zip(axes, results["sizes"]):
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in size["indexes"]:
            label = r["index"] if r["index"] != "hnsw" else f"hnsw {r['setting'].split(',')[0]}"
            groups.setdefault(label, []).append(r)
        for label, group in groups.items():
            ax.plot([r["median_ms"] for r in group], [r["recall_at_10"] for r in group], "o-", label=label)
        ax.axhline(GOAL_RECALL, color="grey", ls=":", lw=1)
        ax.axvline(GOAL_MS, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("median ms per search (1 query, 1 thread)")
        ax.set_title(f"{size['size']:,} remembered questions")
    axes[0].set_ylabel("recall@10 against the exact index")
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--threads", type=int, default=1, help="torch and faiss threads (default: 1)")
    parser.add_argument("--embed-only", action="store_true", help="only fill the embedding cache")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    from adaptive_gates.models.defaults import default_embedder

    embedder = CachedEmbedder(default_embedder(), max_entries=max(SIZES) + QUERIES, memoise=False)
    queries, memory_questions, filler = benchmark_texts(args.data)
    print(f"{len(queries)} queries, {len(memory_questions)} memory questions, {len(filler)} Wikipedia sentences")
    query_vectors = cached_embeddings(queries, embedder.inner, "skr-scale-queries")
    question_vectors = cached_embeddings(memory_questions, embedder.inner, "skr-scale-questions")
    filler_vectors = cached_embeddings(filler, embedder.inner, "skr-scale-wiki")
    if args.embed_only:
        return
    texts = memory_questions + filler
    vectors = np.concatenate([question_vectors, filler_vectors])
    results = {
        "real_questions": len(memory_questions),
        "environment": {
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0],
            "threads": args.threads,
            "faiss_version": faiss.__version__,
        },
        "sizes": [measure_size(vectors[:n], texts[:n], queries, query_vectors, embedder) for n in SIZES],
    }
    markdown = render(results)
    print(markdown)
    plot(results, RESULTS / "skr_memory_scale.png")
    for path in write_results("skr_memory_scale", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
