"""Helpers shared by the benchmark scripts: data paths, result tables, and timing
variants side by side."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_gates import CachedEmbedder, SKRKnnGate
from adaptive_gates.bundled.datasets import boolq_outcomes
from adaptive_gates.models import cache_dir, default_embedder
from adaptive_gates.records.data import CorpusRecord, OutcomeRecord, iter_jsonl, load_outcomes

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"
ADARAGUE_SPLITS = ("nq", "trivia", "squad", "hotpotqa", "2wikimultihopqa", "musique")


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    """``--data DIR``: the shared data folder (holding ``adarague/``)."""
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"shared data folder (default: {DEFAULT_DATA})")


def adarague_path(data: Path, split: str) -> Path:
    """The outcome records of one AdaRAGUE train split."""
    path = data / "adarague" / f"{split}.train.jsonl"
    if not path.is_file():
        raise SystemExit(f"missing {path}: pass --data pointing at the shared data folder")
    return path


def smollm2_boolq(n: int, seed: int = 0) -> list[OutcomeRecord]:
    """The embedded SmolLM2's own outcome records on ``n`` packaged BoolQ questions
    (``adaptive_gates.bundled.datasets.boolq_outcomes``), collected once under ``cache_dir()``:
    a run asking for fewer reuses the first ``n`` of a larger sample of the same seed."""
    return boolq_outcomes(n, cache_dir() / "benchmarks" / f"boolq-smollm2-seed{seed}.jsonl", seed=seed)


@dataclass(frozen=True)
class HotpotContext:
    """An AdaRAGUE HotpotQA question with its context paragraphs as corpus records."""

    question: str
    answers: list[str]
    supporting: list[CorpusRecord]  # HotpotQA's ``is_supporting`` paragraphs: the gold ones
    others: list[CorpusRecord]  # the question's distractor paragraphs found in the corpus


def hotpotqa_contexts(data: Path, corpus: Sequence[CorpusRecord]) -> list[HotpotContext]:
    """The AdaRAGUE HotpotQA questions (HotpotQA dev questions, file order) whose
    supporting paragraphs are all in ``corpus`` with the same title and text."""
    by_paragraph = {(r.title, r.text): r for r in corpus}
    found = []
    for _, obj in iter_jsonl(adarague_path(data, "hotpotqa")):
        paragraphs = [(by_paragraph.get((c["title"], c["text"])), c["is_supporting"]) for c in obj["context"]]
        supporting = [r for r, gold in paragraphs if gold]
        if supporting and all(supporting):
            others = [r for r, gold in paragraphs if not gold and r is not None]
            found.append(HotpotContext(obj["question"], obj["answers"], supporting, others))
    return found


def overhead_gates(data: Path, *, k: int, queries: int) -> tuple[SKRKnnGate, SKRKnnGate, list[str]]:
    """The SKR gate whose framework overhead the integration benchmarks measure:
    ``SKRKnnGate(k)`` fitted on AdaRAGUE NQ's outcome records (MiniLM), and the first
    ``queries`` distinct SQuAD questions to ask it. Two gates over the same memory: the
    first's embedder already holds every query's vector (lookups only, so the gate's own
    work is small and stable), the second embeds the queries with MiniLM live."""
    memory = load_outcomes(adarague_path(data, "nq"))
    asked = list(dict.fromkeys(r.question for r in load_outcomes(adarague_path(data, "squad"))))[:queries]
    inner = default_embedder()
    memory_questions = [r.question for r in memory]
    memory_vectors, query_vectors = inner.embed(memory_questions), inner.embed(asked)
    cached, live = CachedEmbedder(inner), CachedEmbedder(inner, memoise=False)
    cached.store(memory_questions + asked, np.vstack([memory_vectors, query_vectors]))
    live.store(memory_questions, memory_vectors)
    return SKRKnnGate(cached, k=k).fit_outcomes(memory), SKRKnnGate(live, k=k).fit_outcomes(memory), asked


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats are shown with three decimals, None as n/a."""

    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float):
            return f"{value:.3f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(name: str, markdown: str, data: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``results/<name>.md`` and ``results/<name>.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    md, js = RESULTS / f"{name}.md", RESULTS / f"{name}.json"
    md.write_text(markdown + "\n", encoding="utf-8")
    js.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return md, js


def percentiles(seconds: Sequence[float]) -> dict[str, float]:
    """Median, p90 and p95 of durations given in seconds, in milliseconds."""
    ms = np.asarray(seconds, dtype=float) * 1000
    return {
        "median_ms": float(np.median(ms)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p95_ms": float(np.percentile(ms, 95)),
        "n": int(ms.size),
    }


def _rotations(names: list[str], items: Sequence[Any], repeats: int):
    """Per round and item, the variants in an order rotated from item to item and round
    to round, so no variant always runs first (warm caches) or last."""
    for round_ in range(repeats):
        for i, item in enumerate(items):
            shift = (round_ + i) % len(names)
            yield item, names[shift:] + names[:shift]


def interleaved(
    calls: dict[str, Callable[[Any], Any]], items: Sequence[Any], repeats: int, warm_up: int = 5
) -> dict[str, list[float]]:
    """Seconds per call of each variant on each item, measured side by side: per item
    every variant in turn (order rotated), ``repeats`` rounds, round-major order. The
    first ``warm_up`` items are run once untimed (lazy imports, first-call caches)."""
    for item in items[:warm_up]:
        for call in calls.values():
            call(item)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for item, order in _rotations(list(calls), items, repeats):
        for name in order:
            start = time.perf_counter()
            calls[name](item)
            times[name].append(time.perf_counter() - start)
    return times


async def ainterleaved(
    calls: dict[str, Callable[[Any], Awaitable[Any]]], items: Sequence[Any], repeats: int, warm_up: int = 5
) -> dict[str, list[float]]:
    """``interleaved`` for coroutine functions, inside one event loop."""
    for item in items[:warm_up]:
        for call in calls.values():
            await call(item)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for item, order in _rotations(list(calls), items, repeats):
        for name in order:
            start = time.perf_counter()
            await calls[name](item)
            times[name].append(time.perf_counter() - start)
    return times
