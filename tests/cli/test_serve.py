"""``adaptive-gates serve`` as a user runs it: its own process, stopped by SIGTERM, and
started again over the gate directory its feedback was saved to; and what its flags
build (``--no-save``), served from the test's process."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import threading

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
        (["--gate", served_gate_dir, "--corpus", served_corpus, "--trusted-proxy", "proxy"], "IP address or network"),
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


#: Seconds a request to a live server may take before the test calls it hung.
HANG_BOUND = 600.0


def _stream_and_leave(url: str, question: str, outcomes: list[str]) -> None:
    """Stream an answer and leave after two of its pieces: what each outcome was
    (``served``, or the refusal's status)."""
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": 6, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=HANG_BOUND) as response:
        if response.status_code != 200:
            response.read()
            outcomes.append(f"{response.status_code} {response.json()['error']['code']}")
            return
        pieces = 0
        for line in response.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                pieces += 1
                if pieces == 2:
                    break
        outcomes.append("served")


def test_more_streams_than_it_takes_at_once_are_served_or_refused_and_it_stays_ready(served_gate_dir, served_corpus):
    in_flight = 3
    server = ServeProcess(
        "--gate", served_gate_dir, "--corpus", served_corpus, "--no-save", "--max-in-flight", str(in_flight)
    )
    with server:
        outcomes: list[str] = []
        questions = [f"Name {n} famous rivers of Europe." for n in range(2, in_flight + 4)]
        clients = [threading.Thread(target=_stream_and_leave, args=(server.url, q, outcomes)) for q in questions]
        for client in clients:
            client.start()
        for client in clients:
            client.join(timeout=HANG_BOUND)
        assert not any(client.is_alive() for client in clients), "a stream got neither its pieces nor a refusal"
        assert len(outcomes) == in_flight + 2 and set(outcomes) <= {"served", "503 server_overloaded"}, outcomes
        assert outcomes.count("served") >= 1
        assert httpx.get(f"{server.url}/readyz", timeout=HANG_BOUND).status_code == 200
        assert ask(server.url, "Name a famous river of Europe.", max_tokens=2).status_code == 200


def test_forwarding_headers_are_believed_only_from_a_trusted_proxy(served_gate_dir, served_corpus, caplog):
    """A local client that says it forwards for other addresses gets no more requests,
    nor another address in the log, unless its address is a ``--trusted-proxy``."""
    served = ("--gate", served_gate_dir, "--corpus", served_corpus, "--no-save", "--rate-limit", "2")
    forwarded = [{"X-Forwarded-For": f"203.0.113.{n}"} for n in range(3)]
    with caplog.at_level(logging.INFO, logger="adaptive_gates.serve.access"):
        with command_in_process(*served) as server:
            statuses = [httpx.get(f"{server.url}/v1/models", headers=h).status_code for h in forwarded]
        assert statuses == [200, 200, 429]
        logged = [r.getMessage() for r in caplog.records if r.name == "adaptive_gates.serve.access"]
        assert not any("203.0.113" in line for line in logged)
        assert sum(line.startswith('127.0.0.1 key=- "GET /v1/models"') for line in logged) == 3
        caplog.clear()
        with command_in_process(*served, "--trusted-proxy", "127.0.0.1") as behind_proxy:
            statuses = [httpx.get(f"{behind_proxy.url}/v1/models", headers=h).status_code for h in forwarded]
        assert statuses == [200, 200, 200]  # three clients, each within its rate
        logged = [r.getMessage() for r in caplog.records if r.name == "adaptive_gates.serve.access"]
        assert [line.split()[0] for line in logged if "/v1/models" in line] == [f"203.0.113.{n}" for n in range(3)]


def test_a_plain_answer_cut_by_sigterm_gets_openais_503_and_no_traceback(served_gate_dir, served_corpus):
    server = ServeProcess(
        "--gate", served_gate_dir, "--corpus", served_corpus, "--no-save", "--max-answer-tokens", "2000",
        "--max-in-flight", "1", "--drain-seconds", "1",
    )  # fmt: skip
    counting = {"role": "user", "content": "Write the numbers from 1 to 2000, separated by commas."}
    url = f"{server.url}/v1/chat/completions"
    answers: list[httpx.Response] = []

    def ask_for_a_long_answer() -> None:
        answer = None
        while answer is None or answer.json().get("error", {}).get("code") == "server_overloaded":
            answer = httpx.post(url, json={"messages": [counting], "max_tokens": 2000}, timeout=HANG_BOUND)
        answers.append(answer)

    with server:
        asking = threading.Thread(target=ask_for_a_long_answer)
        asking.start()
        # under way once the server takes no other answer (--max-in-flight 1); the probe
        # asks for too long an answer, refused at once when it is let in
        probe = {"messages": [counting], "max_tokens": 2001}
        while httpx.post(url, json=probe, timeout=HANG_BOUND).status_code == 400:
            pass
        status, output = server.stop()
        asking.join(timeout=HANG_BOUND)
    (answer,) = answers
    assert answer.status_code == 503 and answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["code"] == "server_shutting_down" and error["message"].startswith("server shutting down")
    assert status == -signal.SIGTERM and "Traceback" not in output, output
