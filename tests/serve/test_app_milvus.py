"""``adaptive-gates serve`` over Milvus: the SKR memory and the corpus in a real Milvus
(Lite) server process, two serve processes sharing them, feedback written through one
seen by the other, a server started after the database restarted that comes back
with the same decisions, and a server that rides out the database's outage."""

from __future__ import annotations

import shutil
import time
from itertools import islice

import httpx
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.serve.readiness import REUSE_SECONDS
from support.milvus_server import MilvusServer
from support.serve_process import ServedApp, ServeProcess, ask, command_in_process
from support.shared_data import packaged_wiki_paragraphs

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast


@pytest.fixture
def gate_dir(served_gate_dir, tmp_path):
    shutil.copytree(served_gate_dir, tmp_path / "gate")
    return tmp_path / "gate"


def decision(url: str, question: str) -> dict:
    # one token: the decisions and passages are what is compared, not the answers
    response = ask(url, question, max_tokens=1)
    assert response.status_code == 200, response.text
    return response.json()["adaptive_gates"]


def feedback(url: str, decision_id: str, correct: bool) -> dict:
    return httpx.post(f"{url}/v1/feedback", json={"decision_id": decision_id, "correct": correct}).json()


def test_two_servers_share_one_memory_and_a_restart_decides_the_same(
    gate_dir, served_corpus, embedder, outcome_records, tmp_path
):
    gate = SKRKnnGate.load(gate_dir, embedder=embedder)
    held_out = [r.question for r in outcome_records[300:]]
    # decided only until the first two direct and the first retrieved are found
    direct = list(islice((q for q in held_out if not gate.decide(q).retrieve), 2))
    retrieved = next(q for q in held_out if gate.decide(q).retrieve)
    with MilvusServer(tmp_path / "milvus") as milvus:
        args = ("--gate", gate_dir, "--corpus", served_corpus, "--milvus-uri", milvus.uri, "--max-tokens", "4")
        with ServeProcess(*args) as first, ServeProcess(*args) as second:
            # the first filled the database; the second took it as it was
            assert httpx.get(f"{second.url}/v1/stats").json()["memory"] == {
                "known": gate.memory_.counts[0],
                "unknown": gate.memory_.counts[1],
            }
            before = decision(second.url, direct[0])["decision"]
            assert before == decision(first.url, direct[0])["decision"] | {"latency_ms": before["latency_ms"]}
            # feedback through the first is seen by the second
            taught = feedback(first.url, decision(first.url, direct[0])["id"], correct=False)
            assert taught["label"] == "unknown"
            seen = decision(second.url, direct[0])["decision"]["details"]["neighbours"][0]
            assert (seen["question"], seen["label"]) == (direct[0], "unknown")
            assert httpx.get(f"{second.url}/v1/stats").json()["memory"] == taught["memory"]
            # a later verdict through the second relabels every copy, the first's too (a
            # question answered right stays direct, so its second answer can be judged)
            assert feedback(first.url, decision(first.url, direct[1])["id"], correct=True)["label"] == "known"
            judged_again = decision(second.url, direct[1])
            assert judged_again["route"] == "direct"
            assert feedback(second.url, judged_again["id"], correct=False)["label"] == "unknown"
            relabelled = decision(first.url, direct[1])["decision"]["details"]["neighbours"]
            assert [n["label"] for n in relabelled if n["question"] == direct[1]] == ["unknown", "unknown"]
            # the corpus is searched in the database too
            passages = decision(second.url, retrieved)["passages"]
            assert len(passages) == 3 and all(p["id"] and p["text"] for p in passages)
            expected = {q: decision(second.url, q)["decision"] for q in [*direct, retrieved]}
        # a new server on the restarted database comes back with the same decisions (what
        # the command builds, from this process: the database restarted, not the server)
        milvus.restart()
        with command_in_process(*args) as again:
            for question, wanted in expected.items():
                got = decision(again.url, question)["decision"]
                assert got | {"latency_ms": 0} == wanted | {"latency_ms": 0}
    # the gate's directory was left as it was: the database holds what feedback taught
    assert len(SKRKnnGate.load(gate_dir, embedder=embedder).feedback_) == 0


def test_while_the_database_is_down_chat_falls_back_feedback_waits_and_both_recover(
    embedder, outcome_records, served_chat_model, tmp_path
):
    from adaptive_gates.milvus.memory import MilvusMemory
    from adaptive_gates.milvus.retrieval import MilvusRetriever
    from adaptive_gates.serve import ChatService
    from adaptive_gates.serve.app import create_app

    train = outcome_records[:100]
    gate = SKRKnnGate(embedder).fit_outcomes(train)
    with MilvusServer(tmp_path / "milvus") as milvus:
        gate.attach_memory(MilvusMemory(milvus.uri, "memory", gate.memory_.dimension))
        corpus = MilvusRetriever.from_records(packaged_wiki_paragraphs()[:20], embedder, milvus.uri, "corpus")
        with ServedApp(create_app(ChatService(gate, corpus, served_chat_model, max_tokens=2))) as app:
            known = next(d for d in (decision(app.url, r.question) for r in train) if d["route"] == "direct")
            counts = httpx.get(f"{app.url}/v1/stats").json()["memory"]
            milvus.stop()

            # chat answers on the gate's recorded fallback, without passages (the corpus is
            # in the database too), and says nothing of where the database is
            down = decision(app.url, known["decision"]["question"])
            assert down["route"] == "retrieve" and down["passages"] == []
            assert "cannot be reached" in down["decision"]["error"] and "127.0.0.1" not in down["decision"]["error"]
            # a verdict waits for the database: not taken, and said so with when to retry
            refused = httpx.post(f"{app.url}/v1/feedback", json={"decision_id": known["id"], "correct": False})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "5", refused.text
            assert refused.json()["error"]["code"] == "memory_unavailable" and "127.0.0.1" not in refused.text
            assert httpx.get(f"{app.url}/v1/stats").json()["memory"] is None
            ready = httpx.get(f"{app.url}/readyz")
            assert ready.status_code == 503 and ready.json()["checks"]["memory"] != "ok"

            milvus.start()  # the same database back on the same port: both recover by themselves
            back = decision(app.url, known["decision"]["question"])
            assert back["route"] == "direct" and back["decision"]["error"] is None
            assert back["decision"]["score"] == known["decision"]["score"]
            taught = httpx.post(f"{app.url}/v1/feedback", json={"decision_id": known["id"], "correct": False})
            assert taught.status_code == 200 and taught.json()["label"] == "unknown", taught.text
            # the lesson's copy joined the memory, and the training copy took its verdict
            assert taught.json()["memory"] == {"known": counts["known"] - 1, "unknown": counts["unknown"] + 2}
            time.sleep(REUSE_SECONDS)  # the last readiness result is reused that long
            assert httpx.get(f"{app.url}/readyz").status_code == 200
