"""How far a verdict moves the gate on ``adaptive-gates serve``: only as far as its key
is trusted (a quorum of agreeing keys, or an admin), measured with the two-verdict
attack against a real ``serve`` process; and the lessons, kept beside the gate, listed
and reverted after a restart."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.serve.build import lessons_file
from adaptive_gates.serve.keys import key_id
from support.serve_process import ServeProcess, header_decision

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast

KEYS = {
    "mallory": ("feedback-key-mallory-01234567", "feedback"),
    "trudy": ("feedback-key-trudy-0123456789", "feedback"),
    "admin": ("admin-key-lessons-0123456789", "admin"),
}
#: Direct questions the one-key attack runs over.
ATTACKED = 8


def _headers(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name][0]}"}


def _key_file(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("".join(f"{key} {role}\n" for key, role in KEYS.values()))
    return path


def _ask_as(url: str, question: str, name: str) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": 1}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=_headers(name), timeout=120)


def _verdict(url: str, question: str, name: str, correct: bool = False) -> tuple[dict, dict]:
    """``name`` asks ``question`` and judges the answer; the decision and the verdict's reply."""
    answer = _ask_as(url, question, name)
    assert answer.status_code == 200, answer.text
    decision = header_decision(answer)
    judged = httpx.post(
        f"{url}/v1/feedback", json={"decision_id": decision["id"], "correct": correct}, headers=_headers(name)
    )
    assert judged.status_code == 200, judged.text
    return decision, judged.json()


def _routes(url: str, questions: list[str]) -> list[str]:
    return [header_decision(_ask_as(url, q, "admin"))["route"] for q in questions]


def _direct_questions(gate_dir, embedder, outcome_records) -> list[str]:
    gate = SKRKnnGate.load(gate_dir, embedder=embedder)
    return [r.question for r in outcome_records[300:] if not gate.decide(r.question).retrieve]


def test_one_key_flips_no_question_and_two_agreeing_keys_are_needed(
    served_gate_dir, served_corpus, embedder, outcome_records, tmp_path
):
    """The two-verdict attack: one feedback key asks a direct question twice and marks
    both answers wrong, then does the same over ``ATTACKED`` questions; no question moves
    (every verdict pending), until a second key agrees once on each."""
    gate_dir = shutil.copytree(served_gate_dir, tmp_path / "gate")
    attacked = _direct_questions(gate_dir, embedder, outcome_records)[:ATTACKED]
    assert len(attacked) == ATTACKED
    command = ("--gate", gate_dir, "--corpus", served_corpus, "--api-key-file", _key_file(tmp_path))
    with ServeProcess(*command, "--max-tokens", "1") as server:
        assert _routes(server.url, attacked) == ["direct"] * ATTACKED
        for question in attacked:
            for _ in range(2):
                decision, judged = _verdict(server.url, question, "mallory")
                assert decision["route"] == "direct"  # still: the first verdict taught nothing
                assert judged["status"] == "pending" and judged["label"] is None
                assert judged["quorum"] == {"keys": 1, "needed": 2}
        one_key = _routes(server.url, attacked).count("retrieve")
        # the second key agrees once on each: its verdict and the pending ones teach the gate
        # (a question the lessons on its neighbours sent to retrieval already gets a verdict
        # on a retrieved answer, which agrees with none)
        second = [_verdict(server.url, question, "trudy") for question in attacked]
        two_keys = _routes(server.url, attacked).count("retrieve")
        lessons = httpx.get(f"{server.url}/v1/admin/lessons", headers=_headers("admin")).json()["data"]
    agreed = [judged for decision, judged in second if decision["route"] == "direct"]
    assert len(agreed) >= ATTACKED // 2 and all(x["status"] == "taught" and x["label"] == "unknown" for x in agreed)
    assert one_key == 0
    assert two_keys >= len(agreed), f"two agreeing keys flipped only {two_keys} of {ATTACKED}"
    assert len(lessons) == 3 * ATTACKED
    assert sum(x["status"] == "taught" for x in lessons) == 3 * len(agreed)  # the first key's two, the second's one
    assert {x["judged_by"] for x in lessons} == {f"key:{key_id(KEYS[n][0])}" for n in ("mallory", "trudy")}
    print(json.dumps({"one_key_flips": one_key, "two_keys_flip": two_keys, "questions": ATTACKED}))


def test_lessons_are_kept_beside_the_gate_and_reverted_after_a_restart(
    served_gate_dir, served_corpus, embedder, outcome_records, tmp_path
):
    """Two keys teach a question (its text holding U+2028, a line separator to
    ``str.splitlines``) and one leaves a verdict pending; after a restart an admin lists
    all three, the pending one is taught once a second key agrees, and reverting every
    taught lesson brings the gate's decisions back to what they were."""
    gate_dir = shutil.copytree(served_gate_dir, tmp_path / "gate")
    gate = SKRKnnGate.load(gate_dir, embedder=embedder)
    candidates = [q.replace(" ", "\u2028", 1) for q in _direct_questions(gate_dir, embedder, outcome_records)]
    taught, pending = [q for q in candidates if not gate.decide(q).retrieve][:2]
    before = {q: gate.decide(q) for q in (taught, pending)}
    command = ("--gate", gate_dir, "--corpus", served_corpus, "--api-key-file", _key_file(tmp_path))
    with ServeProcess(*command, "--max-tokens", "1") as server:
        replies = [_verdict(server.url, taught, name)[1] for name in ("mallory", "trudy")]
        assert [x["status"] for x in replies] == ["pending", "taught"]
        assert _verdict(server.url, pending, "mallory")[1]["status"] == "pending"
        learned = header_decision(_ask_as(server.url, taught, "admin"))
        assert learned["score"] > before[taught].score
    kept = lessons_file(gate_dir)
    text = kept.read_text(encoding="utf-8")
    assert kept.parent == gate_dir.parent and text.isascii() and text.count("\n") == 3
    assert not any(key in text for key, _ in KEYS.values())  # the keys' ids, never the keys
    lines = [json.loads(line) for line in text.split("\n") if line]
    assert [(x["question"], x["status"], x["correct"]) for x in lines] == [
        (taught, "taught", False),
        (taught, "taught", False),
        (pending, "pending", False),
    ]
    assert {x["judged_by"] for x in lines} == {f"key:{key_id(KEYS[n][0])}" for n in ("mallory", "trudy")}

    with ServeProcess(*command, "--max-tokens", "1") as restarted:
        admin = _headers("admin")
        listed = httpx.get(f"{restarted.url}/v1/admin/lessons", headers=admin).json()["data"]
        assert [(x["question"], x["status"], x["label"]) for x in listed] == [
            (pending, "pending", None),
            (taught, "taught", "unknown"),
            (taught, "taught", "unknown"),
        ]
        assert all(x["judged_at"] >= lines[0]["judged_at"] > 0 for x in listed)
        # the pending verdict kept across the restart counts: a second key makes the quorum
        assert _verdict(restarted.url, pending, "trudy")[1]["status"] == "taught"
        listed = httpx.get(f"{restarted.url}/v1/admin/lessons", headers=admin).json()["data"]
        assert [x["status"] for x in listed] == ["taught"] * 4
        for lesson in listed:
            url = f"{restarted.url}/v1/admin/lessons/{lesson['decision_id']}/revert"
            reverted = httpx.post(url, headers=admin)
            assert reverted.status_code == 200, reverted.text
            assert reverted.json()["lesson"]["reverted_at"] is not None
        after = {q: header_decision(_ask_as(restarted.url, q, "admin")) for q in (taught, pending)}
    for question, decision in before.items():
        assert (after[question]["route"], after[question]["score"]) == ("direct", pytest.approx(decision.score))
    assert len(SKRKnnGate.load(gate_dir, embedder=embedder).feedback_) == 0  # the reverts were saved
    assert all(
        x["reverted_at"] is not None for x in map(json.loads, lessons_file(gate_dir).read_text().split("\n")[:-1])
    )
