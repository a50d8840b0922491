"""Shared fixtures: the real embedded models and the real shared data."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The ``../shared/data`` folder; tests that need it skip cleanly without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def embedder():
    """The real embedded all-MiniLM-L6-v2, loaded once per test session."""
    from adaptive_gates.models import default_embedder

    return default_embedder()


@pytest.fixture(scope="session")
def nq_outcomes(shared_data):
    """500 real outcome records (Llama-3.1-8B answers on NQ, AdaRAGUE)."""
    from adaptive_gates import load_outcomes

    return load_outcomes(shared_data / "adarague" / "nq.train.jsonl")


@pytest.fixture(scope="session")
def openai_server():
    """A real OpenAI-compatible HTTP server on 127.0.0.1 answering with the embedded
    SmolLM2 (see ``openai_server.py``), started once per test session."""
    from adaptive_gates.models import LocalChatModel
    from openai_server import ChatCompletionsServer

    chat_model = LocalChatModel()
    chat_model.lm.model  # load before serving, so the first request is not a slow one
    server = ChatCompletionsServer(chat_model).start()
    yield server
    server.close()


@pytest.fixture
def openai_base_url(openai_server):
    """The server's base URL, healthy and with a zero request count for each test;
    a test injects faults with ``openai_server.set_fault(...)``."""
    openai_server.reset()
    yield openai_server.base_url
    openai_server.reset()


@pytest.fixture(scope="session")
def small_corpus(shared_data, tmp_path_factory):
    """The first 300 real Wikipedia paragraphs of the shared corpus, as a JSONL file."""
    import json

    from adaptive_gates.data import write_jsonl

    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    with open(shared_data / "wiki_paragraph_corpus.jsonl", encoding="utf-8") as src:
        rows = [json.loads(next(src)) for _ in range(300)]
    write_jsonl(path, [{"id": r["id"], "title": r["title"], "text": r["text"]} for r in rows])
    return path


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain little from a second thread, and when other processes share the
    two cores the thread pool's spin-waiting makes generation several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def lm():
    """The embedded SmolLM2 (the process-wide default), loaded once."""
    from adaptive_gates.models import default_llm

    model = default_llm()
    model.model  # load now rather than inside the first timed call
    return model
