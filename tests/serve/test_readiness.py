"""``GET /readyz``: whether the server can answer now."""

from __future__ import annotations

import asyncio
import socket

import pytest

from adaptive_gates.gates import SKRKnnGate
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
from adaptive_gates.records.data import load_corpus
from adaptive_gates.retrieval.bm25 import BM25Retriever
from adaptive_gates.serve.readiness import Readiness, readiness


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def retriever(corpus_path):
    return BM25Retriever.from_records(load_corpus(corpus_path)[:20])


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_every_dependency_is_checked(openai_base_url, openai_server, retriever, cached_embedder, qa_records):
    upstream = OpenAIChatModel(openai_server.model_id, base_url=openai_base_url)
    gate = SKRKnnGate(cached_embedder, k=3).fit([r.question for r in qa_records[:8]], [0, 1] * 4)
    states = asyncio.run(readiness(upstream, retriever, gate))
    assert states == {"upstream": "ok", "corpus": "ok", "memory": "ok"}
    assert openai_server.model_lists == 1


def test_an_unreachable_upstream_is_named(retriever):
    upstream = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    states = asyncio.run(readiness(upstream, retriever, gate=None))
    assert states == {"upstream": "unreachable (ConnectError)", "corpus": "ok"}


def test_an_in_process_upstream_is_ready_once_loaded(lm):
    assert asyncio.run(readiness(lm, object(), object())) == {"upstream": "ok"}


def test_results_are_reused_for_a_moment(openai_base_url, openai_server, retriever):
    upstream = OpenAIChatModel(openai_server.model_id, base_url=openai_base_url)
    clock = Clock()
    ready = Readiness(upstream, retriever, None, reuse_seconds=2.0, clock=clock)

    async def three_checks():
        first = await ready.checks()
        second = await ready.checks()
        clock.now = 2.5
        third = await ready.checks()
        return first, second, third

    first, second, third = asyncio.run(three_checks())
    assert first == second == third == {"upstream": "ok", "corpus": "ok"}
    assert openai_server.model_lists == 2  # the second check reused the first
