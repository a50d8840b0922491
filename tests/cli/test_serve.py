"""``adaptive-gates serve`` as a user runs it: its own process, stopped by SIGTERM, and
started again over the gate directory its feedback was saved to; and what its flags
build (``--no-save``), served from the test's process."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import httpx
import pytest

from adaptive_gates import SKRKnnGate
from support.milvus_server import free_port
from support.serve_process import SERVED_PARAGRAPHS, ServeProcess, ask, command_in_process, header_decision

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast


def test_the_command_serves_learns_and_comes_back_the_same_after_a_restart(
    served_gate_dir, served_corpus, embedder, outcome_records, tmp_path
):
    gate_dir = tmp_path / "gate"
    shutil.copytree(served_gate_dir, gate_dir)
    gate = SKRKnnGate.load(gate_dir, embedder=embedder)
    question = next(r.question for r in outcome_records[300:] if not gate.decide(r.question).retrieve)
    answers = ("--max-tokens", "6", "--max-answer-tokens", "2000")
    server = ServeProcess("--gate", gate_dir, "--corpus", served_corpus, *answers, "--drain-seconds", "2")
    with server:
        # one token: decisions, feedback and saving are what is checked, not the answers
        first = ask(server.url, question, max_tokens=1)
        assert first.status_code == 200 and header_decision(first)["route"] == "direct"
        decision_id = first.json()["adaptive_gates"]["id"]
        taught = httpx.post(f"{server.url}/v1/feedback", json={"decision_id": decision_id, "correct": False})
        assert taught.json()["label"] == "unknown"
        learned = ask(server.url, question, max_tokens=1).json()["adaptive_gates"]["decision"]
        # stopped while an answer of minutes streams: it is cut after the drain time, and the
        # process ends by itself (stop() kills one still running after 60 s)
        counting = {"role": "user", "content": "Write the numbers from 1 to 2000, separated by commas."}
        body = {"messages": [counting], "max_tokens": 2000, "stream": True}
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as under_way:
            next(under_way.iter_lines())
            status, output = server.stop()
        # uvicorn shuts down cleanly, then exits by the signal it was stopped with
        assert status == -signal.SIGTERM and "Traceback" not in output
        # it said what it was doing, where it listens, and logged each request without its question
        assert "adaptive-gates serve: loading the skr-knn gate" in output
        assert f"{SERVED_PARAGRAPHS} passages: ready in" in output
        assert f"listening on {server.url}: the chat page at {server.url}/" in output
        assert output.count('"POST /v1/chat/completions" 200') == 3 and '"POST /v1/feedback" 200' in output
        assert question not in output
    # what feedback taught was saved over the gate's directory
    assert len(SKRKnnGate.load(gate_dir, embedder=embedder).feedback_) == 1
    with ServeProcess("--gate", gate_dir, "--corpus", served_corpus, "--max-tokens", "6") as restarted:
        after = ask(restarted.url, question, max_tokens=1).json()["adaptive_gates"]["decision"]
    assert (after["retrieve"], after["score"], after["details"]) == (
        learned["retrieve"],
        learned["score"],
        learned["details"],
    )


def test_no_save_leaves_the_gate_directory_as_it_was(served_gate_dir, served_corpus, tmp_path):
    gate_dir = tmp_path / "gate"
    shutil.copytree(served_gate_dir, gate_dir)
    before = {p.name: p.read_bytes() for p in gate_dir.iterdir()}
    # what the command builds, served from this process: the flag is the test, not the process
    with command_in_process("--gate", gate_dir, "--corpus", served_corpus, "--max-tokens", "4", "--no-save") as server:
        reply = ask(server.url, "who wrote the book tale of two cities", max_tokens=1)
        decision_id = reply.json()["adaptive_gates"]["id"]
        assert httpx.post(f"{server.url}/v1/feedback", json={"decision_id": decision_id, "correct": True}).is_success
    assert {p.name: p.read_bytes() for p in gate_dir.iterdir()} == before


def test_a_bad_command_line_fails_before_anything_loads(served_gate_dir, served_corpus, tmp_path, capsys, monkeypatch):
    """Each mistake is one error and exit status 2, before a model loads or a port opens:
    the first through the console command, the others in this process (where loading or
    listening would fail the test)."""
    from adaptive_gates.cli import main
    from adaptive_gates.models.embedding.embedder import SentenceEmbedder
    from adaptive_gates.models.lm.loaded import LoadedCausalLM

    nowhere = f"http://127.0.0.1:{free_port()}"
    redis_nowhere = f"redis://127.0.0.1:{free_port()}/0"
    torn = shutil.copytree(served_gate_dir, tmp_path / "torn" / "gate")
    (tmp_path / "torn" / "gate.lessons.jsonl").write_text('{"decision_id": "dec-1", "question": "Who wr\n')
    cases = [
        (["--gate", served_gate_dir, "--corpus", served_corpus, "--upstream-model", "m"], "go together"),
        (["--gate", served_gate_dir, "--corpus", tmp_path / "none.jsonl"], "no such file"),
        (["--gate", tmp_path / "nothing", "--corpus", served_corpus], "nothing"),
        (["--gate", served_gate_dir, "--corpus", served_corpus, "--upstream-timeout", "0"], "positive number"),
        (["--gate", served_gate_dir, "--corpus", served_corpus, "--max-answer-tokens", "64"], "more than --max-answer"),
        (["--gate", served_gate_dir, "--corpus", served_corpus, "--upstream-base-url", "ftp://x"], "http"),
        (["--gate", served_gate_dir, "--corpus", served_corpus, "--milvus-uri", nowhere], "cannot connect to Milvus"),
        (["--gate", torn, "--corpus", served_corpus], "gate.lessons.jsonl, line 1: not a lesson"),
        (["--gate", served_gate_dir, "--corpus", served_corpus, "--state-url", "http://x"], "no Redis URL"),
        (["--gate", served_gate_dir, "--corpus", served_corpus, "--state-url", redis_nowhere], "does not answer"),
    ]
    (args, says), *in_process = cases
    command = [sys.executable, "-m", "adaptive_gates.cli", "serve", *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and says in result.stderr, (args, result.stderr)

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("work began before the command line was checked")

    monkeypatch.setattr(SentenceEmbedder, "_load", refuse)
    monkeypatch.setattr(LoadedCausalLM, "_load", refuse)
    monkeypatch.setattr("uvicorn.Server.run", refuse)
    for args, says in in_process:
        try:
            status = main(["serve", *map(str, args)])
        except SystemExit as exit:  # argparse's usage errors
            status = exit.code
        stderr = capsys.readouterr().err
        assert status == 2 and says in stderr, (args, stderr)
        assert stderr.startswith("adaptive-gates: error:") or "usage:" in stderr


def test_with_no_arguments_the_command_serves_a_shipped_gate_over_a_shipped_corpus():
    from adaptive_gates.bundled.shipped import pretrained_path

    shipped = {p.name: p.read_bytes() for p in pretrained_path("draft-check").iterdir()}
    with ServeProcess("--max-tokens", "6") as server:  # the test's own port; nothing else
        reply = ask(server.url, "who wrote the book tale of two cities", max_tokens=1)
        assert reply.status_code == 200
        record = reply.json()["adaptive_gates"]
        decision = record["decision"]
        # the shipped draft-check gate, checking its draft by BM25 (as it was fitted) over
        # the Wikipedia paragraphs the package's AdaRAGUE records carry
        assert decision["gate"] == "draft-check" and decision["error"] is None
        assert len(decision["passages"]) == 3 and decision["llm_calls"] == 1.0
        checked = [p["id"] for p in decision["passages"]]
        assert all(id.startswith("w") for id in checked)
        if record["route"] == "retrieve":  # answered over the passages the gate checked
            assert [p["id"] for p in record["passages"]] == checked
        else:
            assert record["route"] == "draft" and record["passages"] == []
        output = server.output()
        assert "8405 passages: ready in" in output and f"the chat page at {server.url}/" in output
        # it says whose outcomes the shipped gate holds, against the model it serves
        fitted = "pretrained:draft-check is fitted on outcomes of meta-llama/Llama-3.1-8B-Instruct"
        assert f"{fitted}, not of SmolLM2-135M-Instruct" in output
    # a shipped gate is never saved over
    assert {p.name: p.read_bytes() for p in pretrained_path("draft-check").iterdir()} == shipped
