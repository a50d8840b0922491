"""``adaptive-gates serve`` against calling its upstream LLM directly: requests per
second, median/p90 latency and the gate's own share of the time, at 1, 8 and 32
concurrent clients.

Separate processes: the upstream (an OpenAI-compatible server, ``_upstream.py``), the
real ``adaptive-gates serve`` command pointing at it (``--upstream-base-url``), and
this script, the load generator: N clients (one ``httpx.AsyncClient``), each sending
non-streaming requests back to back over a fixed list of real questions, the held-out
AdaRAGUE NQ questions (records 300 on of ``adarague_outcomes("nq")``). The gate is an
``SKRKnnGate`` (MiniLM, k=10) fitted on the first 300 records and saved to a temp dir;
the corpus is the first ``--passages`` (500) paragraphs of the shared Wikipedia corpus
(``wiki_paragraph_corpus.jsonl`` under ``--data``), else of the packaged BoolQ
passages, embedded into faiss by serve at each start (~70 ms a passage on one busy
core, hence not more; a flat search over 500 or 2,000 vectors costs about the same).

Two upstreams:
1. ``smollm2``: the embedded SmolLM2 answers (greedy, ``--max-tokens`` 16), generating
   the requests that wait together in batches of up to 8; fewer requests. Every
   answer it gives is recorded.
2. ``replay``: answers at once with the answers upstream 1 recorded for the same
   prompts. It replays recorded answers, no LLM runs: what it shows is serve's own
   overhead (gate, retrieval, HTTP hop, records) without the LLM's time.

Per upstream and number of clients, in one run: (a) direct, the same chat request serve
would send for a direct route (``build_prompt(question)``, no passages) straight to the
upstream; (b) via serve (the question as the user message). The two run side by side,
back to back in an order rotated from level to level and round to round (the replay in
``--rounds`` rounds). Reported: req/s, p50/p90 latency, serve - direct p50, the
retrieval rate, and the gate's share: mean ``decision.latency_ms`` (and retrieval ms)
from serve's decision records over the mean serve latency. Streamed (1 client,
``--streamed`` questions, per route): the time to the first token through serve against
serve's own prompt streamed straight to the upstream (``first_tokens``). The machine's
load average is noted at the start and the end.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/serve_throughput.py [--data DIR] [--requests 400] [--llm-requests 16]

Writes benchmarks/results/serve_throughput.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from _common import REPO, add_data_argument, markdown_table, percentiles, write_results
from adaptive_gates import SKRKnnGate
from adaptive_gates.answering.answerer import build_prompt
from adaptive_gates.bundled.datasets import adarague_outcomes, packaged_corpus
from adaptive_gates.models import default_embedder
from adaptive_gates.records.data import CorpusRecord, Hit, iter_jsonl, write_jsonl
from adaptive_gates.serve.health import wait_until_healthy

logger = logging.getLogger("serve_throughput")

UPSTREAM_SCRIPT = REPO / "benchmarks" / "_upstream.py"
FIT_RECORDS = 300
CLIENT_TIMEOUT = 600.0  # seconds: 32 clients queue behind one CPU-bound LLM
PATHS = ("direct", "serve")


# ---------------------------------------------------------------- processes
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Process:
    """A server in a process of its own, its output in a log file."""

    name: str
    command: list[str]
    port: int
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    @classmethod
    def on_free_port(cls, name: str, command: list[str], logs: Path) -> Process:
        """``command --port P`` on a free port P, its output in ``logs/<name>.log``."""
        port = free_port()
        return cls(name, [*command, "--port", str(port)], port, logs / f"{name}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Process:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(self.command, env=env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_healthy(self, timeout: float = 900.0) -> None:
        try:
            wait_until_healthy(
                self.url, alive=lambda: self.popen is not None and self.popen.poll() is None, timeout=timeout
            )
        except (RuntimeError, TimeoutError) as exc:
            raise SystemExit(f"{self.name}: {exc}:\n{self.log.read_text()[-3000:]}") from None

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.popen.kill()


@contextmanager
def running(*processes: Process) -> Iterator[None]:
    """Start the processes together, wait until each answers, stop them on leaving."""
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.wait_healthy()
        yield
    finally:
        for process in processes:
            process.stop()


# ---------------------------------------------------------------- inputs
def fitted_gate(directory: Path) -> tuple[Path, list[str]]:
    """The SKR-kNN gate fitted on AdaRAGUE NQ's first 300 records, saved under
    ``directory``; the held-out questions (distinct, file order)."""
    records = adarague_outcomes("nq")
    gate = SKRKnnGate(default_embedder()).fit_outcomes(records[:FIT_RECORDS])
    held_out = list(dict.fromkeys(r.question for r in records[FIT_RECORDS:]))
    return gate.save(directory / "gate"), held_out


def corpus(data: Path, passages: int) -> tuple[list[CorpusRecord], str]:
    """The first ``passages`` paragraphs of the shared Wikipedia corpus, or of the
    packaged BoolQ passages when ``data`` lacks it; the source's name."""
    wiki = data / "wiki_paragraph_corpus.jsonl"
    if wiki.is_file():
        records = [
            CorpusRecord(str(o["id"]), str(o.get("title") or ""), o["text"])
            for _, o in itertools.islice(iter_jsonl(wiki), passages)
        ]
        return records, f"{wiki.name} (first {len(records)})"
    return packaged_corpus("boolq")[:passages], f"packaged BoolQ passages (first {passages})"


# ---------------------------------------------------------------- load
@dataclass
class Run:
    """What one path answered under one load: latencies (s), answers, serve's records."""

    requests: int = 0
    wall_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: Run) -> None:
        self.requests += other.requests
        self.wall_s += other.wall_s
        self.latencies += other.latencies
        self.answers.update(other.answers)
        self.records += other.records


@dataclass(frozen=True)
class Target:
    """Where one path's requests go and what they say."""

    url: str
    direct: bool
    max_tokens: int
    model: str  # the upstream's name, which serve answers as too
    key: str | None = None  # sent as a bearer key

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.key is None else {"Authorization": f"Bearer {self.key}"}

    def body(self, question: str, stream: bool = False, prompt: str | None = None) -> dict[str, Any]:
        """The chat request for ``question``: as serve takes it, or straight to the upstream
        with the answer prompt (``prompt``, else the passage-less one)."""
        content = (prompt or build_prompt(question)) if self.direct else question
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": stream,
        }


async def load(client: httpx.AsyncClient, target: Target, questions: Sequence[str], clients: int, total: int) -> Run:
    """``total`` requests by ``clients`` clients, each sending its next as soon as its
    last is answered, the questions taken in turn."""
    run = Run(requests=total)
    counter = itertools.count()

    async def one_client() -> None:
        while (i := next(counter)) < total:
            question = questions[i % len(questions)]
            started = time.perf_counter()
            body = target.body(question)
            response = await client.post(f"{target.url}/v1/chat/completions", json=body, headers=target.headers)
            elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise SystemExit(f"{target.url} answered {response.status_code}: {response.text[:500]}")
            payload = response.json()
            run.latencies.append(elapsed)
            run.answers[question] = payload["choices"][0]["message"]["content"]
            if "adaptive_gates" in payload:
                run.records.append(payload["adaptive_gates"])

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    run.wall_s = time.perf_counter() - started
    return run


#: The streamed paths: through serve; serve's own prompt straight to the upstream; and,
#: for a retrieved question, the passage-less direct prompt (what the LLM would read
#: without retrieval).
STREAM_PATHS = ("serve", "direct", "direct_without_passages")


@dataclass
class Streamed:
    """One streamed request: seconds to the first token and to the end, and serve's
    decision record (from the last chunk; ``None`` straight from the upstream)."""

    first_s: float
    whole_s: float
    record: dict[str, Any] | None


async def stream_once(client: httpx.AsyncClient, target: Target, body: dict[str, Any]) -> Streamed:
    """``body`` streamed to ``target``, timed to its first content and to its end."""
    started = time.perf_counter()
    first, record = None, None
    async with client.stream("POST", f"{target.url}/v1/chat/completions", json=body, headers=target.headers) as r:
        if r.status_code != 200:
            raise SystemExit(f"{target.url} answered {r.status_code}: {(await r.aread())[:500]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            payload = json.loads(line[6:])
            record = payload.get("adaptive_gates", record)
            if first is None and payload["choices"] and payload["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - started
    whole = time.perf_counter() - started
    return Streamed(whole if first is None else first, whole, record)


def served_prompt(question: str, record: dict[str, Any]) -> str:
    """The user message serve sent its upstream for ``question`` (``service.prepare``):
    the answer prompt with the passages its record lists."""
    hits = [Hit(p["id"], p["text"], p["score"] or 0.0, p["title"]) for p in record["passages"]]
    return build_prompt(question, [h.as_passage() for h in hits])


async def first_tokens(
    client: httpx.AsyncClient, targets: dict[str, Target], questions: Sequence[str]
) -> dict[str, Any]:
    """One client streaming: per question, serve's route and prompt from one request
    through serve (untimed), then, in an order rotated from question to question, the
    question through serve, serve's prompt straight to the upstream, and for a retrieved
    question the passage-less prompt straight to it. By route: time to the first token
    and to the end per path, and serve's gate and retrieval milliseconds."""
    serve, direct = targets["serve"], targets["direct"]
    routes: dict[str, dict[str, list[Streamed]]] = {}
    for i, question in enumerate(questions):
        asked = (await stream_once(client, serve, serve.body(question, stream=True))).record
        assert asked is not None, "serve's last chunk carries its decision record"
        bodies = {
            "serve": serve.body(question, stream=True),
            "direct": direct.body(question, stream=True, prompt=served_prompt(question, asked)),
        }
        if asked["route"] == "retrieve":
            bodies["direct_without_passages"] = direct.body(question, stream=True)
        paths = list(bodies)
        shift = i % len(paths)
        timed = routes.setdefault(asked["route"], {path: [] for path in STREAM_PATHS})
        for path in paths[shift:] + paths[:shift]:
            timed[path].append(await stream_once(client, serve if path == "serve" else direct, bodies[path]))
    out: dict[str, Any] = {}
    for route, timed in routes.items():
        records = [t.record for t in timed["serve"] if t.record is not None]
        out[route] = {
            **{
                path: {
                    "first_token": percentiles([t.first_s for t in runs]),
                    "whole": percentiles([t.whole_s for t in runs]),
                }
                for path, runs in timed.items()
                if runs
            },
            "gate_mean_ms": float(np.mean([r["latency_ms"]["gate"] for r in records])),
            "retrieval_mean_ms": float(np.mean([r["latency_ms"]["retrieval"] for r in records])),
        }
        serve_p50, direct_p50 = (out[route][p]["first_token"]["median_ms"] for p in ("serve", "direct"))
        out[route]["serve_over_direct"] = serve_p50 / direct_p50
        out[route]["serve_minus_direct_ms"] = serve_p50 - direct_p50
    return out


async def measure(
    targets: dict[str, Target],
    questions: Sequence[str],
    levels: Sequence[int],
    per_level: int,
    rounds: int,
    streamed: int,
) -> dict[str, Any]:
    """Each path at each number of clients, side by side; then the streaming row."""
    limits = httpx.Limits(max_connections=max(levels) * 2, max_keepalive_connections=max(levels) * 2)
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT, limits=limits) as client:
        for target in targets.values():  # warm-up: connections, first-call caches
            await load(client, target, questions, 1, 2)
        out: dict[str, Any] = {"levels": {}}
        for level_index, clients in enumerate(levels):
            runs = {path: Run() for path in targets}
            # every client sends at least two requests back to back
            each = max(per_level // rounds, 2 * clients)
            for round_ in range(rounds):
                shift = (level_index + round_) % len(PATHS)
                for path in PATHS[shift:] + PATHS[:shift]:
                    runs[path].add(await load(client, targets[path], questions, clients, each))
            out["levels"][clients] = runs
            logger.warning(
                "%d clients: %s", clients, {p: f"{r.requests / r.wall_s:.2f} req/s" for p, r in runs.items()}
            )
        out["streaming"] = await first_tokens(client, targets, questions[:streamed])
    return out


def asked_by_both(levels: dict[int, dict[str, Run]], questions: Sequence[str]) -> list[str]:
    """The questions both paths asked at some level: those whose prompts the LLM
    answered, so the replay holds their answers."""
    asked = {path: set().union(*(runs[path].answers for runs in levels.values())) for path in PATHS}
    return [q for q in questions if all(q in a for a in asked.values())]


# ---------------------------------------------------------------- figures
def summary(runs: dict[str, Run]) -> dict[str, Any]:
    """The figures of one level: per path req/s and latency; serve's extra p50, its
    retrieval rate, where its time went, and whether direct routes got the same answers."""
    out: dict[str, Any] = {}
    for path, run in runs.items():
        out[path] = {"requests": run.requests, "req_per_s": run.requests / run.wall_s, **percentiles(run.latencies)}
    serve = runs["serve"]
    records = serve.records
    mean_ms = float(np.mean(serve.latencies)) * 1000
    gate_ms = float(np.mean([r["decision"]["latency_ms"] for r in records]))
    retrieval_ms = float(np.mean([r["latency_ms"]["retrieval"] for r in records]))
    upstream_ms = float(np.mean([r["latency_ms"]["upstream"] for r in records]))
    routes = {r["decision"]["question"]: r["route"] for r in records}
    direct_routed = [q for q, route in routes.items() if route == "direct" and q in runs["direct"].answers]
    out["serve_minus_direct_p50_ms"] = out["serve"]["median_ms"] - out["direct"]["median_ms"]
    # records and latencies are appended together, one pair a request
    out["serve_by_route"] = {
        route: percentiles([t for t, r in zip(serve.latencies, records) if r["route"] == route])
        for route in sorted({r["route"] for r in records})
    }
    out["retrieval_rate"] = float(np.mean([r["route"] == "retrieve" for r in records]))
    out["serve_mean_ms"] = mean_ms
    out["gate_mean_ms"] = gate_ms
    out["retrieval_mean_ms"] = retrieval_ms
    out["upstream_mean_ms"] = upstream_ms
    out["gate_share"] = gate_ms / mean_ms
    out["retrieval_share"] = retrieval_ms / mean_ms
    out["direct_routed_questions"] = len(direct_routed)
    out["same_answer_as_direct"] = sum(serve.answers[q] == runs["direct"].answers[q] for q in direct_routed)
    return out


def by_route(level: dict[str, Any]) -> str:
    """Serve's p50 latency of the requests it answered directly / with passages."""
    routes = level["serve_by_route"]
    return " / ".join(f"{routes[r]['median_ms']:.1f}" if r in routes else "n/a" for r in ("direct", "retrieve"))


def _load(averages: Sequence[float]) -> str:
    return " / ".join(f"{a:.2f}" for a in averages)


STREAM_HEADER = [
    "upstream",
    "route",
    "questions",
    "first token p50 ms: direct / serve",
    "p90 ms: direct / serve",
    "serve / direct",
    "serve − direct ms",
    "gate + retrieval ms (mean)",
    "whole answer p50 ms: direct / serve",
    "first token p50 ms, direct without passages",
]


def streaming_rows(upstream: str, streaming: dict[str, Any]) -> list[list[Any]]:
    """The first-token rows of one upstream, one a route."""
    rows = []
    for route in ("direct", "retrieve"):
        if route not in streaming:
            continue
        s = streaming[route]
        direct, serve = s["direct"], s["serve"]
        bare = s.get("direct_without_passages")
        rows.append(
            [
                upstream,
                route,
                serve["first_token"]["n"],
                f"{direct['first_token']['median_ms']:.1f} / {serve['first_token']['median_ms']:.1f}",
                f"{direct['first_token']['p90_ms']:.1f} / {serve['first_token']['p90_ms']:.1f}",
                f"{s['serve_over_direct']:.2f}x",
                f"{s['serve_minus_direct_ms']:+.1f}",
                f"{s['gate_mean_ms'] + s['retrieval_mean_ms']:.1f}",
                f"{direct['whole']['median_ms']:.1f} / {serve['whole']['median_ms']:.1f}",
                "(the same prompt)" if bare is None else f"{bare['first_token']['median_ms']:.1f}",
            ]
        )
    return rows


def report(result: dict[str, Any]) -> str:
    """The results as markdown."""
    rows, stream_rows = [], []
    for upstream, measured in result["upstreams"].items():
        for clients, s in measured["levels"].items():
            for path in PATHS:
                p = s[path]
                serve_only = path == "serve"
                rows.append(
                    [
                        upstream,
                        clients,
                        path,
                        p["requests"],
                        f"{p['req_per_s']:.2f}",
                        f"{p['median_ms']:.1f}",
                        f"{p['p90_ms']:.1f}",
                        f"{s['serve_minus_direct_p50_ms']:+.1f}" if serve_only else "",
                        by_route(s) if serve_only else "",
                        s["retrieval_rate"] if serve_only else "",
                        f"{s['gate_mean_ms']:.1f}" if serve_only else "",
                        f"{s['retrieval_mean_ms']:.1f}" if serve_only else "",
                        f"{s['gate_share']:.1%}" if serve_only else "",
                        f"{s['retrieval_share']:.1%}" if serve_only else "",
                    ]
                )
        stream_rows += streaming_rows(upstream, measured["streaming"])
    checks = [
        f"{upstream} with {clients} client(s): {s['same_answer_as_direct']}/{s['direct_routed_questions']}"
        for upstream, measured in result["upstreams"].items()
        for clients, s in measured["levels"].items()
    ]
    header = [
        "upstream",
        "clients",
        "path",
        "requests",
        "req/s",
        "p50 ms",
        "p90 ms",
        "serve − direct p50 ms",
        "serve p50 ms: direct-routed / retrieved",
        "retrieval rate",
        "gate ms (mean)",
        "retrieval ms (mean)",
        "gate share",
        "retrieval share",
    ]
    s = result["setup"]
    return "\n".join(
        [
            "# `adaptive-gates serve` against its upstream called directly",
            "",
            f"Gate: SKRKnnGate (MiniLM, k=10) fitted on the first {FIT_RECORDS} AdaRAGUE NQ records; questions: the "
            f"{s['questions']} held-out ones after them, taken in turn; corpus: {s['corpus']} in serve's faiss index "
            f"(k={s['k']}). Upstreams, each an OpenAI-compatible server in its own process: **smollm2**, the embedded "
            f"SmolLM2-135M generating (greedy, max_tokens {s['max_tokens']}, requests waiting together generated in "
            f"batches of up to {s['batch']}); **replay**, which replays the answers smollm2 recorded for the same "
            "prompts at once, no LLM running (serve's own overhead without the LLM's time). `direct` sends serve's "
            "direct-route request (`build_prompt(question)`) straight to the upstream; `serve` goes through "
            "`adaptive-gates serve` in its own process. Clients send non-streaming requests back to back from one "
            f"load-generator process; both paths measured side by side, order rotated. {s['cpus']} CPUs shared with "
            f"other jobs, every process on one torch thread; Python {s['python']}. Load average (1/5/15 min) at the "
            f"start {_load(s['load_average']['start'])}, at the end {_load(s['load_average']['end'])}.",
            "",
            markdown_table(header, rows),
            "",
            "gate share / retrieval share: mean `decision.latency_ms` / mean retrieval ms (serve's decision records) "
            "over the mean latency a client saw through serve. A request serve retrieved for asks the upstream with "
            f"{s['k']} passages in the prompt: with smollm2 the LLM reads more, which is part of serve − direct; the "
            "direct-routed p50 compares like with like.",
            "",
            f"The replay rows cycle the {s['questions']} questions, so from the second pass on a question's vector "
            "comes from serve's memo of question vectors (the gate's MiniLM embedding is skipped): they show serve's "
            "overhead for questions asked before. The smollm2 rows at one client ask each question once, so their "
            "gate ms is what a new question costs (its embedding and the kNN search); a retrieved question is "
            "searched with the vector the gate computed.",
            "",
            "Questions serve routed direct that got the same answer as direct (a check, not a timing): "
            + "; ".join(checks)
            + ".",
            "",
            "## Streaming (1 client): time to the first token, through serve and direct",
            "",
            markdown_table(STREAM_HEADER, stream_rows),
            "",
            "`direct` streams straight to the upstream the very prompt serve sent it for the question (for a "
            f"retrieved one, with its {s['k']} passages): serve / direct is what serve adds before the first token, "
            "its gate and retrieval included. The last column is the passage-less prompt straight to the upstream: "
            "on a retrieved question, what the LLM would take to its first token without the passages it reads. "
            "Each question is first asked through serve once, untimed, for its route and prompt (so the gate finds "
            "its vector in serve's memo); then the paths stream it in an order rotated from question to question. "
            "The replay upstream sends each answer as one piece, so its first token is its whole answer.",
        ]
    )


# ---------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(parser)
    parser.add_argument(
        "--requests", type=int, default=400, help="replay: requests per path and level (at least 2 a client a round)"
    )
    parser.add_argument(
        "--llm-requests", type=int, default=16, help="smollm2: requests per path and level (at least 2 a client)"
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32], help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=2, help="replay: rounds of both paths per level")
    parser.add_argument("--questions", type=int, default=64, help="held-out questions cycled through")
    parser.add_argument("--passages", type=int, default=500, help="corpus passages (serve embeds them at start)")
    parser.add_argument("--max-tokens", type=int, default=16, help="answer length")
    parser.add_argument(
        "--streamed", type=int, default=12, help="questions streamed per upstream (both routes among them)"
    )
    args = parser.parse_args()
    counts = [args.requests, args.llm_requests, *args.clients, args.rounds, args.questions, args.passages]
    if min(*counts, args.streamed) < 1:
        parser.error(
            "--requests, --llm-requests, --clients, --rounds, --questions, --passages and --streamed must be >= 1"
        )
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    batch, k = 8, 3
    load_at_start = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="serve-throughput-") as tmp:
        work = Path(tmp)
        gate_dir, held_out = fitted_gate(work)
        questions = held_out[: args.questions]
        passages, corpus_name = corpus(args.data, args.passages)
        write_jsonl(work / "corpus.jsonl", [{"id": r.id, "title": r.title, "text": r.text} for r in passages])
        recorded = work / "recorded.jsonl"

        def upstream(name: str, *options: str) -> Process:
            return Process.on_free_port(name, [sys.executable, str(UPSTREAM_SCRIPT), *options], work)

        def serve(name: str, upstream_url: str) -> Process:
            command = [sys.executable, "-m", "adaptive_gates.cli", "serve", "--gate", str(gate_dir)]
            command += ["--corpus", str(work / "corpus.jsonl"), "--k", str(k), "--no-save"]
            command += ["--upstream-base-url", f"{upstream_url}/v1", "--upstream-model", name]
            command += ["--upstream-timeout", str(CLIENT_TIMEOUT), "--max-tokens", str(args.max_tokens)]
            # every client at once, as fast as they ask: what is measured is serve's own cost
            command += ["--max-in-flight", str(max(args.clients)), "--rate-limit", "0"]
            return Process.on_free_port(f"serve-{name}", command, work)

        llm = upstream("smollm2", "smollm2", "--record", str(recorded), "--batch", str(batch))
        replay = upstream("replay", "replay", str(recorded))
        # Both serve processes start with the LLM (serve asks nothing of its upstream
        # before the first request), so the replay's serve is ready when its turn comes.
        serve_llm, serve_replay = serve("smollm2", llm.url), serve("replay", replay.url)
        measured: dict[str, Any] = {}
        started = time.perf_counter()
        with running(llm, serve_llm, serve_replay):
            logger.warning("servers up in %.0f s", time.perf_counter() - started)
            targets = {
                "direct": Target(llm.url, True, args.max_tokens, "smollm2"),
                "serve": Target(serve_llm.url, False, args.max_tokens, "smollm2"),
            }
            measured["smollm2"] = asyncio.run(
                measure(targets, questions, args.clients, args.llm_requests, 1, args.streamed)
            )
            llm.stop()  # the LLM's CPU back before the replay runs
            replayed = asked_by_both(measured["smollm2"]["levels"], questions)
            with running(replay):
                targets = {
                    "direct": Target(replay.url, True, args.max_tokens, "replay"),
                    "serve": Target(serve_replay.url, False, args.max_tokens, "replay"),
                }
                measured["replay"] = asyncio.run(
                    measure(targets, replayed, args.clients, args.requests, args.rounds, args.streamed)
                )

    result = {
        "setup": {
            "gate": "SKRKnnGate(k=10), MiniLM",
            "fit_records": FIT_RECORDS,
            "questions": len(questions),
            "replayed_questions": len(replayed),
            "corpus": corpus_name,
            "k": k,
            "max_tokens": args.max_tokens,
            "batch": batch,
            "requests": args.requests,
            "llm_requests": args.llm_requests,
            "rounds": args.rounds,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": {"start": load_at_start, "end": os.getloadavg()},
            "replay": "the replay upstream replays the answers SmolLM2 gave for the same prompts; no LLM runs",
        },
        "upstreams": {
            upstream: {
                "levels": {clients: summary(runs) for clients, runs in m["levels"].items()},
                "streaming": m["streaming"],
            }
            for upstream, m in measured.items()
        },
    }
    markdown = report(result)
    print(markdown)
    md, js = write_results("serve_throughput", markdown, result)
    print(f"\nwrote {md} and {js}")


if __name__ == "__main__":
    main()
