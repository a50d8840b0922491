"""The serve and Milvus snippets of the README and of the serve page (docs/serve.md), run
as a user pastes them, against a real server and a real Milvus (Lite) server process;
only their addresses are this run's."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import httpx
import pytest

from adaptive_gates import SKRKnnGate
from support.milvus_server import MilvusServer
from support.readme_blocks import readme_blocks
from support.serve_process import ServeProcess, serving

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SERVE_PAGE = ROOT / "docs" / "serve.md"


def block_with(marker: str, language: str = "python", page: Path = SERVE_PAGE) -> str:
    """The one ``language`` block of ``page`` that holds ``marker``."""
    found = [code for _, code in readme_blocks(page, language) if marker in code]
    assert len(found) == 1, f"{len(found)} {page.name} {language} blocks hold {marker!r}"
    return found[0]


def test_the_readme_key_file_block_starts_a_server_only_its_keys_reach(served_gate_dir, served_corpus, tmp_path):
    """The bash block as pasted: its first line writes the key file; the second starts
    the command on every address with it (the gate and corpus are this run's)."""
    make_keys, serve = block_with("--api-key-file keys.txt", "bash").strip().splitlines()
    subprocess.run(["bash", "-c", make_keys], cwd=tmp_path, check=True)
    roles = {role: key for key, role in (line.split() for line in (tmp_path / "keys.txt").read_text().splitlines())}
    assert set(roles) == {"chat", "admin"} and all(len(key) == 48 for key in roles.values())
    ours = {"gates/skr": served_gate_dir, "CORPUS.jsonl": served_corpus, "keys.txt": tmp_path / "keys.txt"}
    command = shlex.split(serve)
    assert command[:2] == ["adaptive-gates", "serve"]
    with ServeProcess(*(ours.get(arg, arg) for arg in command[2:])) as server:

        def status(path: str, role: str | None) -> int:
            headers = {} if role is None else {"Authorization": f"Bearer {roles[role]}"}
            return httpx.get(f"{server.url}{path}", headers=headers, timeout=30).status_code

        assert [status("/v1/models", None), status("/v1/models", "chat"), status("/v1/stats", "chat")] == [
            401,
            200,
            403,
        ]
        assert status("/v1/stats", "admin") == 200 and status("/healthz", None) == 200
        assert "0.0.0.0" in server.output() and not any(key in server.output() for key in roles.values())


def test_the_serve_page_shows_the_readmes_client_snippet():
    """The one snippet on both pages, so the run below covers both."""
    marker = "x-adaptive-gates-decision"
    assert block_with(marker, page=SERVE_PAGE) == block_with(marker, page=README)


def test_the_readme_client_snippet_sees_the_decision(
    served_gate_dir, wiki_paragraphs, embedder, served_chat_model, capsys
):
    code = block_with("x-adaptive-gates-decision", page=README)
    gate = SKRKnnGate.load(served_gate_dir, embedder=embedder)
    with serving(gate, wiki_paragraphs[:20], served_chat_model, max_tokens=6) as served:
        namespace: dict = {}
        exec(code.replace("http://127.0.0.1:8000", served.url), namespace)
    assert '"route":' in capsys.readouterr().out
    assert namespace["record"]["decision"]["question"] == "Who wrote Hamlet?"


def test_the_readme_milvus_snippet_shares_a_verdict(tmp_path, monkeypatch, capsys):
    code = block_with("MilvusMemory.factory")
    monkeypatch.chdir(tmp_path)  # it saves gates/skr-milvus where it runs
    with MilvusServer(tmp_path / "milvus") as milvus:
        namespace: dict = {}
        exec(code.replace("http://127.0.0.1:19530", milvus.uri), namespace)
        best = namespace["retriever"].search("How is ethanol fuel made?", k=1)[0].title
    printed = capsys.readouterr().out
    assert "'question': 'Who wrote the novel Dracula?', 'label': 'known'" in printed
    assert best in printed
