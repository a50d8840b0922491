"""The zero-argument ``adaptive-gates serve`` (the shipped draft-check gate, the embedded
model answering) under bursts of concurrent streams: as many as ``--max-in-flight``
(default 8) and twice as many, each burst repeated ``--repeats`` times (3).

Every client streams an answer of ``--max-tokens`` (8) tokens and leaves after two
pieces, as a reader who closes the tab does. Counted per burst: the streams served (a
200 whose pieces arrived), refused with 503 (as many as the server takes at once),
504 (the upstream gave nothing in time), any other status, and the streams that got
nothing within ``--hang-seconds`` (a wedged server); then whether ``/readyz`` answers
200 after the burst. What the counts should show: served + 503 = every stream, 504 and
hung none, ready after each burst.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/serve_streams.py [--max-in-flight 8] [--repeats 3]

Prints the table and writes benchmarks/results/serve_streams.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import httpx

from _common import markdown_table, write_results
from adaptive_gates.serve.health import wait_until_healthy

QUESTIONS = [
    "Who wrote the book A Tale of Two Cities?",
    "What is the capital of Australia?",
    "When did the Berlin Wall fall?",
    "Who painted the Mona Lisa?",
    "What is the longest river in Africa?",
    "Who discovered penicillin?",
    "In which year did the Titanic sink?",
    "What is the largest planet of the solar system?",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def has_content(line: str) -> bool:
    """Whether a server-sent event line carries a piece of the answer."""
    if not line.startswith("data: {"):
        return False
    choices = json.loads(line.removeprefix("data: ")).get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


async def stream_and_leave(client: httpx.AsyncClient, url: str, question: str, max_tokens: int, hang: float) -> str:
    """One stream, left after two pieces: ``served``, the refusal's status, or ``hung``."""
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens, "stream": True}
    try:
        async with asyncio.timeout(hang):
            async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    return str(response.status_code)
                pieces = 0
                async for line in response.aiter_lines():
                    if has_content(line):
                        pieces += 1
                        if pieces == 2:
                            break
                return "served"
    except TimeoutError:
        return "hung"


async def burst(url: str, streams: int, max_tokens: int, hang: float) -> dict[str, Any]:
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=None) as client:
        outcomes = await asyncio.gather(
            *(stream_and_leave(client, url, QUESTIONS[i % len(QUESTIONS)], max_tokens, hang) for i in range(streams))
        )
        seconds = time.perf_counter() - started
        try:
            ready = (await client.get(f"{url}/readyz", timeout=hang)).status_code
        except httpx.TimeoutException:
            ready = "hung"
    counts = Counter(outcomes)
    return {"streams": streams, "counts": dict(counts), "ready": ready, "seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--hang-seconds", type=float, default=300.0)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [sys.executable, "-m", "adaptive_gates.cli", "serve", "--no-save", "--port", str(port)]
    command += ["--max-in-flight", str(args.max_in_flight), "--no-access-log"]
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_healthy(url, alive=lambda: server.poll() is None, timeout=900)
            bursts = []
            for repeat in range(args.repeats):
                for streams in (args.max_in_flight, 2 * args.max_in_flight):
                    result = {
                        "repeat": repeat + 1,
                        **asyncio.run(burst(url, streams, args.max_tokens, args.hang_seconds)),
                    }
                    print(result, flush=True)
                    bursts.append(result)
        finally:
            server.terminate()
            server.wait(timeout=60)
    rows = [
        [
            b["repeat"],
            b["streams"],
            b["counts"].get("served", 0),
            b["counts"].get("503", 0),
            b["counts"].get("504", 0),
            sum(n for k, n in b["counts"].items() if k not in ("served", "503", "504", "hung")),
            b["counts"].get("hung", 0),
            b["ready"],
            b["seconds"],
        ]
        for b in bursts
    ]
    header = ["repeat", "streams", "served", "503", "504", "other", "hung", "/readyz after", "seconds"]
    table = markdown_table(header, rows)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    markdown = f"# serve_streams\n\n--max-in-flight {args.max_in_flight}, {machine}\n\n{table}"
    print(markdown)
    write_results("serve_streams", markdown, {"max_in_flight": args.max_in_flight, "bursts": bursts})


if __name__ == "__main__":
    main()
