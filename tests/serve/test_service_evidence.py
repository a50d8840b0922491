"""Whose questions an answer's evidence may show on ``adaptive-gates serve``: the
nearest past questions of the SKR evidence include those taught through feedback, which
another key never reads unless the operator shares them (``--share-evidence``), and the
page then draws only their label. A real server over HTTP with keys (the app in a
thread, the embedded SmolLM2 answering, the real gate), and the page in Debian's
chromium."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.retrieval import DenseRetriever
from adaptive_gates.serve import ChatService
from adaptive_gates.serve.app import create_app
from adaptive_gates.serve.keys import KeyRing
from support.serve_process import ServedApp, header_decision

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast

KEYS = {
    "alice": ("feedback-key-alice-0123456789", "feedback"),
    "bob": ("feedback-key-bob-012345678901", "feedback"),
    "carol": ("chat-key-carol-01234567890123", "chat"),
    "admin": ("admin-key-evidence-0123456789", "admin"),
}
#: Questions a user would not want others to read; the first the gate answers direct (so a
#: verdict labels it) is taught. The gate decides, so they are chosen by what it does.
PRIVATE = [
    "Who is the president of my company, Kowalska Holdings?",
    "Who is the head of the company that fired Jan Wisniewski last week?",
]
#: What another user asks, near the taught questions.
PROBE = "Who runs Kowalska Holdings, the company?"


def _headers(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name][0]}"}


def _ask(url: str, question: str, name: str, **body) -> httpx.Response:
    payload = {"messages": [{"role": "user", "content": question}], "max_tokens": 1, **body}
    answer = httpx.post(f"{url}/v1/chat/completions", json=payload, headers=_headers(name), timeout=120)
    assert answer.status_code == 200, answer.text
    return answer


def _neighbours(answer: httpx.Response) -> list[dict]:
    return answer.json()["adaptive_gates"]["decision"]["details"]["neighbours"]


def _streamed_record(url: str, question: str, name: str) -> tuple[str, dict]:
    """The streamed answer's whole text as sent, and the record of its last chunk."""
    answer = _ask(url, question, name, stream=True)
    chunks = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")]
    return answer.text, next(c["adaptive_gates"] for c in reversed(chunks) if "adaptive_gates" in c)


@pytest.fixture(scope="module")
def service(served_gate_dir, served_corpus, embedder, served_chat_model, tmp_path_factory) -> ChatService:
    gate_dir = shutil.copytree(served_gate_dir, tmp_path_factory.mktemp("evidence") / "gate")
    gate = SKRKnnGate.load(gate_dir, embedder=embedder)
    return ChatService(gate, DenseRetriever.from_jsonl(served_corpus, embedder), served_chat_model, max_tokens=1)


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> KeyRing:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text("".join(f"{key} {role}\n" for key, role in KEYS.values()))
    return KeyRing.from_sources(key_file=path, environ={})


@pytest.fixture(scope="module")
def taught(service, keys) -> str:
    """A private question two feedback keys taught the gate (a direct answer marked wrong
    by each: the quorum); the question."""
    secret = next(q for q in PRIVATE if not service.gate.decide(q).retrieve)
    with ServedApp(create_app(service, keys)) as app:
        for name in ("alice", "bob"):
            decision = header_decision(_ask(app.url, secret, name))
            assert decision["route"] == "direct"
            body = {"decision_id": decision["id"], "correct": False}
            judged = httpx.post(f"{app.url}/v1/feedback", json=body, headers=_headers(name))
            assert judged.status_code == 200, judged.text
        assert judged.json()["status"] == "taught" and judged.json()["label"] == "unknown"
    return secret


def test_another_keys_taught_question_is_left_out_of_the_evidence(service, keys, taught):
    with ServedApp(create_app(service, keys)) as app:
        answer = _ask(app.url, PROBE, "carol")
        text, streamed = _streamed_record(app.url, PROBE, "carol")
        own = _neighbours(_ask(app.url, PROBE, "alice"))
        operator = _neighbours(_ask(app.url, PROBE, "admin"))
    neighbours = _neighbours(answer)
    hidden = [n for n in neighbours if n.get("taught_by_another_key")]
    # the taught copies are among the nearest, by label and similarity only
    assert hidden and all(n["question"] is None and n["label"] == "unknown" for n in hidden)
    assert taught not in answer.text and taught not in text
    assert streamed["decision"]["details"]["neighbours"] == neighbours
    # the questions the gate was fitted on are the operator's, and stay
    fitted = [n for n in neighbours if not n.get("taught_by_another_key")]
    assert fitted and all(isinstance(n["question"], str) and n["question"] for n in fitted)
    # a key that taught it reads it (it typed it), and so does an admin
    for seen in (own, operator):
        assert [n["question"] for n in seen].count(taught) == len(hidden)
        assert not any(n.get("taught_by_another_key") for n in seen)


def test_shared_evidence_shows_the_text_and_the_page_only_the_label(service, keys, taught, browser_page):
    sharing = ChatService(
        service.gate, service.retriever, service.upstream, max_tokens=1, lessons=service.lessons, share_evidence=True
    )
    with ServedApp(create_app(sharing, keys)) as app:
        neighbours = _neighbours(_ask(app.url, PROBE, "carol"))
        shared = [n for n in neighbours if n.get("taught_by_another_key")]
        assert shared and all(n["question"] == taught for n in shared)

        page = browser_page
        page.goto(app.url)
        page.get_by_test_id("max-tokens").fill("1")
        for attempt in range(2):  # the first asks without a key: the page then asks for one
            if attempt:
                page.get_by_test_id("api-key").fill(KEYS["carol"][0])
            count = page.get_by_test_id("answer").count()
            page.get_by_test_id("question").fill(PROBE)
            page.get_by_test_id("send").click()
            state = "error" if attempt == 0 else "done"
            page.get_by_test_id("answer").nth(count).and_(page.locator(f'[data-state="{state}"]')).wait_for(
                timeout=120_000
            )
        answer = page.get_by_test_id("answer").last
        rows = answer.locator("[data-taught-by-another-key]")
        assert rows.count() == len(shared)
        for row in rows.all():
            assert row.get_attribute("data-label") == "unknown"
            assert row.get_by_test_id("neighbour-question").inner_text() == "a question another user taught"
        drawn = [r.get_by_test_id("neighbour-question").inner_text() for r in answer.get_by_test_id("neighbour").all()]
        assert len(drawn) == len(neighbours) and taught not in page.content()
