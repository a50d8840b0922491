"""The README's serve and Milvus snippets, run as a user pastes them, against a real
server and a real Milvus (Lite) server process; only their addresses are this run's."""

from __future__ import annotations

from pathlib import Path

import pytest

from adaptive_gates import SKRKnnGate
from milvus_server import MilvusServer
from readme_blocks import readme_blocks
from serve_process import serving

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast

README = Path(__file__).resolve().parents[1] / "README.md"


def block_with(marker: str) -> str:
    """The README's one python block that holds ``marker``."""
    found = [code for _, code in readme_blocks(README) if marker in code]
    assert len(found) == 1, f"{len(found)} README blocks hold {marker!r}"
    return found[0]


def test_the_readme_client_snippet_sees_the_decision(
    served_gate_dir, wiki_paragraphs, embedder, served_chat_model, capsys
):
    code = block_with("x-adaptive-gates-decision")
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
