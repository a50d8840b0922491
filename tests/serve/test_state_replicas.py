"""Two ``adaptive-gates serve`` processes behind one load balancer: one Milvus (Lite)
server for the gate's memory and the corpus, one Redis for their state (``--state-url``).
A decision taken by one is judged through the other, a lesson is listed and reverted
from either, and a feedback quota is counted once over both."""

from __future__ import annotations

import shutil
from itertools import islice

import httpx
import pytest

from adaptive_gates import SKRKnnGate
from support.milvus_server import MilvusServer
from support.serve_process import ServeProcess, ask

pytestmark = pytest.mark.live_server  # real servers: left out of make test-fast

#: Verdicts a client may give an hour, over both servers.
QUOTA = 3


def _decision(url: str, question: str) -> dict:
    response = ask(url, question, max_tokens=1)
    assert response.status_code == 200, response.text
    return response.json()["adaptive_gates"]


def _verdict(url: str, decision_id: str, correct: bool) -> httpx.Response:
    return httpx.post(f"{url}/v1/feedback", json={"decision_id": decision_id, "correct": correct})


def _lessons(url: str) -> dict[str, dict]:
    listed = httpx.get(f"{url}/v1/admin/lessons")
    assert listed.status_code == 200, listed.text
    return {lesson["decision_id"]: lesson for lesson in listed.json()["data"]}


def _revert(url: str, decision_id: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/admin/lessons/{decision_id}/revert")


def test_two_servers_share_one_state_in_redis(
    served_gate_dir, served_corpus, embedder, outcome_records, redis_server, tmp_path
):
    gate_dir = shutil.copytree(served_gate_dir, tmp_path / "gate")
    gate = SKRKnnGate.load(gate_dir, embedder=embedder)
    direct = list(islice((r.question for r in outcome_records[300:] if not gate.decide(r.question).retrieve), 2))
    with MilvusServer(tmp_path / "milvus") as milvus:
        args = ("--gate", gate_dir, "--corpus", served_corpus, "--milvus-uri", milvus.uri)
        args += ("--state-url", redis_server.url, "--feedback-per-hour", str(QUOTA), "--max-tokens", "4")
        with ServeProcess(*args) as first, ServeProcess(*args) as second:
            ready = httpx.get(f"{second.url}/readyz").json()
            assert ready["checks"]["state"] == "ok", ready
            memory = httpx.get(f"{first.url}/v1/stats").json()["memory"]

            # a decision taken by the first is judged through the second (verdict 1 of the quota)
            taken = _decision(first.url, direct[0])
            judged = _verdict(second.url, taken["id"], correct=False)
            assert judged.status_code == 200, judged.text
            assert (judged.json()["status"], judged.json()["label"]) == ("taught", "unknown")
            assert judged.json()["memory"] == {"known": memory["known"], "unknown": memory["unknown"] + 1}
            # once: the first sees the verdict given through the second
            again = _verdict(first.url, taken["id"], correct=True)
            assert again.status_code == 409 and again.json()["error"]["code"] == "already_judged"

            # the lesson is listed by both, and reverted through the one that did not teach it
            assert _lessons(first.url)[taken["id"]] == _lessons(second.url)[taken["id"]]
            assert _lessons(first.url)[taken["id"]]["status"] == "taught"
            reverted = _revert(first.url, taken["id"])
            assert reverted.status_code == 200, reverted.text
            assert reverted.json()["memory"] == memory  # the copy it taught left the shared memory
            assert _lessons(second.url)[taken["id"]]["reverted_at"] is not None
            twice = _revert(second.url, taken["id"])
            assert twice.status_code == 409 and twice.json()["error"]["code"] == "already_reverted"

            # verdicts 2 and 3 through either; a fourth is past the quota, counted over both
            for asked, judging in ((second, first), (first, first)):
                accepted = _verdict(judging.url, _decision(asked.url, direct[1])["id"], correct=True)
                assert accepted.status_code == 200, accepted.text
            refused = _verdict(second.url, _decision(second.url, direct[1])["id"], correct=True)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "feedback_quota_exceeded"
            assert int(refused.headers["retry-after"]) > 0
