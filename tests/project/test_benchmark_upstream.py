"""The upstreams ``benchmarks/serve_throughput.py`` measures ``adaptive-gates serve``
against, run as the benchmark runs them (``benchmarks/_upstream.py`` in processes of
their own): SmolLM2 answering requests that arrive together gives each the answer the
model gives it alone and records it; the replay gives back exactly what was recorded,
streamed or not, and refuses a prompt it never saw."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from adaptive_gates.answering.answerer import build_prompt
from adaptive_gates.records.data import iter_jsonl
from adaptive_gates.serve.health import wait_until_healthy
from support.milvus_server import free_port

UPSTREAM = Path(__file__).resolve().parents[2] / "benchmarks" / "_upstream.py"


@contextmanager
def upstream(*args: str) -> Iterator[str]:
    """``_upstream.py ARGS`` on a free port until the block ends; its base URL."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(UPSTREAM), *args, "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", alive=lambda: process.poll() is None)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
        assert "Traceback" not in output, output


def ask_together(url: str, conversations: list[list[dict[str, str]]]) -> list[str]:
    """Every conversation sent at once; the answers in order."""

    async def run() -> list[str]:
        async with httpx.AsyncClient(timeout=300) as client:
            body = {"max_tokens": 6, "temperature": 0}
            sent = [client.post(f"{url}/v1/chat/completions", json={**body, "messages": c}) for c in conversations]
            responses = await asyncio.gather(*sent)
        assert [r.status_code for r in responses] == [200] * len(conversations)
        return [r.json()["choices"][0]["message"]["content"] for r in responses]

    return asyncio.run(run())


def streamed(url: str, conversation: list[dict[str, str]]) -> str:
    """The answer's pieces, joined, from a streamed request."""
    body = {"max_tokens": 6, "messages": conversation, "stream": True}
    text = ""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                text += json.loads(line.removeprefix("data: "))["choices"][0]["delta"].get("content", "")
    return text


def test_smollm2_answers_are_recorded_and_the_replay_gives_them_back(outcome_records, served_chat_model, tmp_path):
    conversations = [[{"role": "user", "content": build_prompt(r.question)}] for r in outcome_records[300:303]]
    alone = [served_chat_model.chat(c, max_tokens=6).text for c in conversations]
    recorded = tmp_path / "recorded.jsonl"
    with upstream("smollm2", "--record", str(recorded)) as url:
        assert ask_together(url, conversations) == alone
        assert streamed(url, conversations[0]) == alone[0]
    lines = [line for _, line in iter_jsonl(recorded)]
    assert sorted((json.dumps(line["messages"]), line["text"]) for line in lines) == sorted(
        (json.dumps(c), text) for c, text in zip([*conversations, conversations[0]], [*alone, alone[0]])
    )

    with upstream("replay", str(recorded)) as url:
        assert ask_together(url, conversations) == alone
        assert streamed(url, conversations[1]) == alone[1]
        never = httpx.post(
            f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "never asked"}]}, timeout=30
        )
        assert never.status_code == 500 and "no answer was recorded" in never.json()["error"]["message"]
