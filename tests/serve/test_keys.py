"""``adaptive-gates serve`` where strangers reach it: API keys (what each role may
reach, refusals in OpenAI's shape as the ``openai`` SDK reads them, keys never written
out, no open address without a key), the Host check, the browser's security headers and
error bodies that say nothing internal. A real server over HTTP (the app in a thread,
the embedded SmolLM2 answering), the page in Debian's chromium, and the command line as
a user types it."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import shutil

import httpx
import numpy as np
import openai
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.cli import main
from adaptive_gates.models.embedded import SMOLLM2_ID as MODEL  # the name the served embedded model answers as
from adaptive_gates.records.decision import GateDecision
from adaptive_gates.retrieval import DenseRetriever
from adaptive_gates.serve import ChatService
from adaptive_gates.serve.app import create_app
from adaptive_gates.serve.keys import KEY_VARIABLE, KeyRing
from adaptive_gates.serve.limits import Limits
from adaptive_gates.serve.records import DecisionBook, ServedDecision
from support.serve_process import ServedApp

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast

KEYS = {
    "chat": "chat-key-0123456789abcdef",
    "feedback": "feedback-key-0123456789ab",
    "admin": "admin-key-0123456789abcd",
}
QUESTION = "Who wrote Hamlet?"


@pytest.fixture(scope="module")
def service(served_gate_dir, served_corpus, embedder, served_chat_model, tmp_path_factory) -> ChatService:
    gate_dir = shutil.copytree(served_gate_dir, tmp_path_factory.mktemp("network") / "gate")
    gate = SKRKnnGate.load(gate_dir, embedder=embedder)
    return ChatService(gate, DenseRetriever.from_jsonl(served_corpus, embedder), served_chat_model, max_tokens=4)


@pytest.fixture(scope="module")
def served(service, tmp_path_factory):
    """The server with one key of each role, from a key file."""
    key_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    key_file.write_text("# key role\n" + "".join(f"{key} {role}\n" for role, key in KEYS.items()))
    with ServedApp(create_app(service, KeyRing.from_sources(key_file=key_file, environ={}))) as app:
        yield app


def _client(served, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key=key, max_retries=0)


def _ask(client: openai.OpenAI):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}])


def test_without_a_valid_key_the_sdk_gets_openais_authentication_error(served):
    wrong = "sk-not-one-of-this-servers-keys"
    with pytest.raises(openai.AuthenticationError) as caught:
        _ask(_client(served, wrong))
    assert caught.value.status_code == 401 and "not one of this server's" in caught.value.body["message"]
    assert wrong not in caught.value.response.text
    missing = httpx.post(f"{served.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]})
    assert missing.status_code == 401 and "no API key" in missing.json()["error"]["message"]
    for refused in (caught.value.response, missing):
        error = refused.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
        assert refused.headers["www-authenticate"] == "Bearer"


def test_each_role_reaches_its_routes_and_no_further(served):
    answer = _ask(_client(served, KEYS["chat"]))
    decision_id = answer.model_extra["adaptive_gates"]["id"]
    assert answer.choices[0].message.content.strip()
    with pytest.raises(openai.PermissionDeniedError, match="needs a feedback key"):
        _client(served, KEYS["chat"]).post(
            "/feedback", body={"decision_id": decision_id, "correct": True}, cast_to=httpx.Response
        )
    own = _ask(_client(served, KEYS["feedback"])).model_extra["adaptive_gates"]["id"]
    judged = _judge(served.url, own, KEYS["feedback"])
    assert judged.status_code == 200, judged.text
    for path in ("/v1/stats", "/v1/admin/lessons", "/metrics", "/docs", "/openapi.json"):
        assert httpx.get(served.url + path).status_code == 401
        for role in ("chat", "feedback"):
            refused = httpx.get(served.url + path, headers={"Authorization": f"Bearer {KEYS[role]}"})
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_permissions"
        assert httpx.get(served.url + path, headers={"Authorization": f"Bearer {KEYS['admin']}"}).status_code == 200
    assert _client(served, KEYS["admin"]).models.list().data  # admin reaches what chat does
    # the page and the health check stay public: a browser loads the page before any key
    for path in ("/", "/healthz"):
        assert httpx.get(served.url + path).status_code == 200


def _judge(url: str, decision_id: str, key: str | None = None, correct: bool = True) -> httpx.Response:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{url}/v1/feedback", json={"decision_id": decision_id, "correct": correct}, headers=headers)


def test_an_answer_gets_one_verdict_from_the_key_that_asked_or_from_an_admin(service, tmp_path):
    one, two = "feedback-key-one-0123456789", "feedback-key-two-0123456789"
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{one} feedback\n{two} feedback\n{KEYS['admin']} admin\n")
    with ServedApp(create_app(service, KeyRing.from_sources(key_file=key_file, environ={}))) as app:
        asked = {key: _ask(_client(app, key)).model_extra["adaptive_gates"]["id"] for key in (one, two)}
        stranger = _judge(app.url, asked[one], two, correct=False)
        assert stranger.status_code == 403 and stranger.json()["error"]["code"] == "not_your_decision"
        assert _judge(app.url, asked[one], one).status_code == 200
        taught = service.memory_counts()
        for again in (True, False):  # the same verdict or its opposite: the answer has one
            second = _judge(app.url, asked[one], one, correct=again)
            assert second.status_code == 409 and second.json()["error"]["code"] == "already_judged"
        assert service.memory_counts() == taught
        assert _judge(app.url, asked[two], KEYS["admin"]).status_code == 200  # an admin may judge any

        async def twenty_at_once(decision_id: str) -> list[int]:
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {one}"}) as client:
                body = {"decision_id": decision_id, "correct": False}
                sent = [client.post(f"{app.url}/v1/feedback", json=body) for _ in range(20)]
                return sorted(r.status_code for r in await asyncio.gather(*sent))

        fresh = _ask(_client(app, one)).model_extra["adaptive_gates"]["id"]
        assert asyncio.run(twenty_at_once(fresh)) == [200] + [409] * 19

        # an admin reads who taught the gate what, newest first; the refused verdicts are not there
        admin = {"Authorization": f"Bearer {KEYS['admin']}"}
        # (the service is the module's: earlier tests' lessons come after these)
        lessons = httpx.get(f"{app.url}/v1/admin/lessons", headers=admin).json()["data"][:3]
        assert [(x["decision_id"], x["correct"]) for x in lessons] == [
            (fresh, False),
            (asked[two], True),
            (asked[one], True),
        ]
        assert all(x["question"] == QUESTION and x["route"] in ("direct", "retrieve") for x in lessons)
        assert lessons[0]["judged_by"] == lessons[2]["judged_by"] != lessons[1]["judged_by"]
        assert lessons[0]["label"] in ("unknown", None) and lessons[0]["judged_at"] >= lessons[2]["judged_at"]
        newest = httpx.get(f"{app.url}/v1/admin/lessons", params={"limit": 1}, headers=admin).json()["data"]
        assert newest == lessons[:1]
        refused = httpx.get(f"{app.url}/v1/admin/lessons", headers={"Authorization": f"Bearer {one}"})
        assert refused.status_code == 403


PARAPHRASES = [
    "Who is the author of Hamlet?",
    "Which writer wrote the play Hamlet?",
    "Who wrote the tragedy Hamlet?",
    "Hamlet was written by whom?",
    "Who penned Hamlet?",
    "Name the author of the play Hamlet",
]


def test_a_poisoning_is_undone_by_an_admin_reverting_its_lessons(served_gate_dir, embedder, service, tmp_path):
    """A feedback key marks every direct answer to paraphrases of one question wrong; an
    admin reads the lessons and takes them back: the memory, the scores and the gate
    saved over ``--gate`` are as before, and each refusal says why."""
    gate_dir = shutil.copytree(served_gate_dir, tmp_path / "gate")
    gate = SKRKnnGate.load(gate_dir, embedder=embedder)
    saved = functools.partial(gate.save, gate_dir, overwrite=True)
    # a server that trusts each feedback key alone (--lesson-quorum 1), so one key poisons it
    poisoned = ChatService(
        gate, service.retriever, service.upstream, max_tokens=1, after_feedback=saved, lesson_quorum=1
    )
    direct = [q for q in PARAPHRASES if not gate.decide(q).retrieve]
    assert len(direct) >= 2, "the paraphrases must include direct answers for the poisoning to teach the gate"
    scores, rows = gate.score([QUESTION, *PARAPHRASES]), len(gate.memory_)
    feedback_key, admin_key = "feedback-key-poison-0123456", KEYS["admin"]
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{feedback_key} feedback\n{admin_key} admin\n")
    admin = {"Authorization": f"Bearer {admin_key}"}
    with ServedApp(create_app(poisoned, KeyRing.from_sources(key_file=key_file, environ={}))) as app:
        client = _client(app, feedback_key)
        labels = []
        for question in direct:
            answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}])
            judged = _judge(app.url, answer.model_extra["adaptive_gates"]["id"], feedback_key, correct=False)
            labels.append(judged.json()["label"])  # "unknown" while routed direct; none once it retrieves
        taught = labels.count("unknown")
        assert taught >= 2 and len(gate.memory_) == rows + taught
        assert gate.score([QUESTION])[0] > scores[0]

        lessons = httpx.get(f"{app.url}/v1/admin/lessons", headers=admin).json()["data"]
        assert [(x["question"], x["label"]) for x in lessons] == list(zip(direct, labels))[::-1]
        url = f"{app.url}/v1/admin/lessons/{{}}/revert"
        refused = httpx.post(url.format(lessons[0]["decision_id"]), headers={"Authorization": f"Bearer {feedback_key}"})
        assert refused.status_code == 403
        for lesson in lessons:
            reverted = httpx.post(url.format(lesson["decision_id"]), headers=admin)
            assert reverted.status_code == 200 and reverted.json()["lesson"]["reverted_at"] is not None
        again = httpx.post(url.format(lessons[0]["decision_id"]), headers=admin)
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_reverted"
        unknown = httpx.post(url.format("no-such-decision"), headers=admin)
        assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "decision_id"
        listed = httpx.get(f"{app.url}/v1/admin/lessons", headers=admin).json()["data"]
        assert all(x["reverted_at"] is not None for x in listed)

    np.testing.assert_array_equal(gate.score([QUESTION, *PARAPHRASES]), scores)
    reloaded = SKRKnnGate.load(gate_dir, embedder=embedder)  # what a restart reads
    assert len(reloaded.memory_) == rows and len(reloaded.feedback_) == 0
    np.testing.assert_array_equal(reloaded.score([QUESTION, *PARAPHRASES]), scores)


def test_past_its_feedback_quota_a_client_gets_429(service):
    quota = Limits(feedback_per_hour=2)
    rated = ChatService(service.gate, service.retriever, service.upstream, max_tokens=1, limits=quota)
    with ServedApp(create_app(rated)) as app:
        client = openai.OpenAI(base_url=f"{app.url}/v1", api_key="none", max_retries=0)
        asked = [_ask(client).model_extra["adaptive_gates"]["id"] for _ in range(3)]
        assert [_judge(app.url, decision_id).status_code for decision_id in asked[:2]] == [200, 200]
        refused = _judge(app.url, asked[2])
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "feedback_quota_exceeded"
        assert 1 <= int(refused.headers["retry-after"]) <= 1800  # one verdict back every half hour


def test_a_decision_is_held_for_judging_only_so_long():
    now = [0.0]
    book = DecisionBook(max_age=3600, clock=lambda: now[0])
    decision = GateDecision(question=QUESTION, retrieve=True, score=0.5, threshold=0.4, gate="skr-knn")
    served = ServedDecision.new(decision, [])
    book.put(served)
    now[0] = 3599.0
    assert book.get(served.id) is served
    now[0] = 3601.0
    assert book.get(served.id) is None
    assert len(served.id) == len("dec-") + 32  # 128 random bits


def test_no_key_reaches_a_log(served, caplog):
    with caplog.at_level(logging.DEBUG):
        _ask(_client(served, KEYS["chat"]))
        httpx.get(f"{served.url}/v1/stats", headers={"Authorization": f"Bearer {KEYS['feedback']}"})
        with pytest.raises(openai.AuthenticationError):
            _ask(_client(served, "sk-a-wrong-key-0123456789"))
    assert caplog.records  # the requests were logged ...
    assert not any(key in caplog.text for key in (*KEYS.values(), "sk-a-wrong-key-0123456789"))  # ... without keys


def test_key_files_are_read_line_by_line_and_errors_name_the_line_not_the_key(tmp_path):
    good = tmp_path / "keys.txt"
    good.write_text(f"\n# comment\n{KEYS['chat']} chat\n{KEYS['admin']}   admin\n")
    ring = KeyRing.from_sources(["cli-key-0123456789abcdef"], good, environ={KEY_VARIABLE: "env-key-0123456789abcdef"})
    assert len(ring) == 4
    assert ring.role_of(KEYS["chat"]) == "chat" and ring.role_of(KEYS["admin"]) == "admin"
    assert ring.role_of("cli-key-0123456789abcdef") == ring.role_of("env-key-0123456789abcdef") == "admin"
    assert ring.role_of(KEYS["chat"] + "x") is None and ring.role_of("") is None
    assert not KeyRing.from_sources(environ={})
    for text, message in (
        (f"{KEYS['chat']} owner\n", "line 1: write a key and its role"),
        (f"\n{KEYS['chat']}\n", "line 2: write a key and its role"),
        ("short chat\n", "line 1: an API key must be at least 16"),
        (f"{KEYS['chat']} chat\n{KEYS['chat']} admin\n", "a key is given twice, with two roles"),
    ):
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        with pytest.raises(ValueError, match=message) as caught:
            KeyRing.from_sources(key_file=bad, environ={})
        assert KEYS["chat"] not in str(caught.value)


def _refuse_work(*args, **kwargs):
    raise AssertionError("the server began loading before its address and keys were checked")


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "my-server.example"])
def test_an_address_other_machines_reach_needs_a_key_before_any_work(
    host, served_gate_dir, served_corpus, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr("adaptive_gates.cli.serve.build_service", _refuse_work)
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    argv = ["serve", "--gate", str(served_gate_dir), "--corpus", str(served_corpus), "--host", host]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"--host {host} is reachable from other machines" in error and "--allow-network-without-keys" in error
    short = tmp_path / "keys.txt"
    short.write_text("too-short chat\n")
    assert main([*argv, "--api-key-file", str(short)]) == 2
    assert "line 1: an API key must be at least 16" in capsys.readouterr().err


def test_loopback_or_an_explicit_flag_serves_without_keys_and_says_so(
    served_gate_dir, served_corpus, monkeypatch, caplog
):
    from adaptive_gates.cli.command import build_parser
    from adaptive_gates.cli.serve import api_keys, say_who_may_ask

    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    parser = build_parser()
    base = ["serve", "--gate", str(served_gate_dir), "--corpus", str(served_corpus)]
    for extra, said in (
        (["--host", "127.0.0.1"], "no API key: serving 127.0.0.1 only"),
        (["--host", "::1"], "no API key: serving ::1 only"),
        (["--host", "0.0.0.0", "--allow-network-without-keys"], "no API key on 0.0.0.0: anyone who reaches it"),
    ):
        caplog.clear()
        args = parser.parse_args(base + extra)
        with caplog.at_level(logging.WARNING, logger="adaptive_gates.cli.serve"):
            keys = api_keys(args)
            say_who_may_ask(keys, args.host)
        assert not keys and said in caplog.text
    monkeypatch.setenv(KEY_VARIABLE, KEYS["admin"])
    assert api_keys(parser.parse_args([*base, "--host", "0.0.0.0"])).role_of(KEYS["admin"]) == "admin"


def test_the_page_asks_for_a_key_and_each_role_shows_what_it_may_do(served, browser_page):
    page = browser_page
    page.goto(served.url)
    assert page.get_by_test_id("api-key-field").is_hidden()  # until the server asks for one
    page.get_by_test_id("question").fill(QUESTION)
    page.get_by_test_id("send").click()
    refused = page.get_by_test_id("answer").and_(page.locator('[data-state="error"]'))
    refused.wait_for(timeout=60_000)
    assert refused.get_by_test_id("answer-error").inner_text().startswith("HTTP 401: no API key")
    assert page.get_by_test_id("api-key-field").is_visible()
    assert page.get_by_test_id("page-error").is_hidden()  # no figures without an admin key, and no alarm
    page.get_by_test_id("api-key").fill(KEYS["chat"])
    page.get_by_test_id("question").fill(QUESTION)
    page.get_by_test_id("send").click()
    answered = page.get_by_test_id("answer").nth(1)
    answered.and_(page.locator('[data-state="done"]')).wait_for(timeout=120_000)
    answered.get_by_test_id("feedback-up").click()
    status = answered.get_by_test_id("feedback-status")
    status.filter(has_text="HTTP 403").wait_for()
    assert "needs a feedback key" in status.inner_text()
    # the key is kept for the tab: a reload still sends it
    page.reload()
    assert page.get_by_test_id("api-key").input_value() == KEYS["chat"]


def _get(app, path: str, host: str, **headers: str) -> httpx.Response:
    async def get() -> httpx.Response:
        # as a server would: the 500 the app sends, not the exception it logs and re-raises
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as client:
            return await client.get(path, headers=headers)

    return asyncio.run(get())


def test_a_name_the_server_was_not_given_is_refused(service, served_gate_dir, served_corpus):
    from adaptive_gates.cli.command import build_parser
    from adaptive_gates.cli.serve import allowed_hosts

    base = ["serve", "--gate", str(served_gate_dir), "--corpus", str(served_corpus)]
    names = allowed_hosts(build_parser().parse_args(base))  # the default on 127.0.0.1
    app = create_app(service, allowed_hosts=names)
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST"):
        assert _get(app, "/healthz", host).status_code == 200, host
    # a page of another site whose own name resolves to 127.0.0.1 (DNS rebinding)
    rebound = _get(app, "/v1/stats", "attacker.example:8000")
    assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "invalid_host"
    assert "attacker" not in rebound.text
    parser = build_parser()
    assert allowed_hosts(parser.parse_args([*base, "--host", "0.0.0.0", "--allow-network-without-keys"])) is None
    given = allowed_hosts(parser.parse_args([*base, "--host", "0.0.0.0", "--allowed-host", "chat.example.org"]))
    assert given == ["chat.example.org"]
    app = create_app(service, allowed_hosts=given)
    assert _get(app, "/healthz", "chat.example.org").status_code == 200
    assert _get(app, "/healthz", "127.0.0.1").status_code == 400


def test_every_response_carries_the_browsers_security_headers(service):
    app = create_app(service)
    page = _get(app, "/", "127.0.0.1")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
    for response in (page, _get(app, "/healthz", "127.0.0.1"), _get(app, "/static/app.js", "127.0.0.1")):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_unknown_routes_and_methods_answer_in_openais_shape(service):
    app = create_app(service)
    missing = _get(app, "/v1/nothing-here", "127.0.0.1")
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "message": "GET /v1/nothing-here: Not Found",
        "type": "invalid_request_error",
        "param": None,
        "code": "not_found",
    }
    wrong_method = _get(app, "/v1/chat/completions", "127.0.0.1")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in wrong_method.headers["allow"]


def test_a_failure_inside_the_server_says_nothing_internal(service, served_gate_dir, caplog):
    app = create_app(service)

    @app.get("/v1/fails")
    async def fails() -> None:
        raise ConnectionError("milvus at 10.0.0.7:19530 refused the connection")

    with caplog.at_level(logging.ERROR):
        failed = _get(app, "/v1/fails", "127.0.0.1")
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "server_error"
    assert "10.0.0.7" not in failed.text and "milvus" not in failed.text.lower()
    assert "10.0.0.7:19530" in caplog.text  # the operator's log has it


def test_the_page_shows_a_verdict_that_waits_for_other_keys(served, browser_page):
    question = "Who painted the Mona Lisa?"  # one no other key judged: no verdict agrees yet
    page = browser_page
    page.goto(served.url)
    for attempt in range(2):  # the first asks without a key: the page then asks for one
        if attempt:
            page.get_by_test_id("api-key").fill(KEYS["feedback"])
        page.get_by_test_id("question").fill(question)
        page.get_by_test_id("send").click()
        state = "error" if attempt == 0 else "done"
        page.get_by_test_id("answer").nth(attempt).and_(page.locator(f'[data-state="{state}"]')).wait_for(
            timeout=120_000
        )
    answered = page.get_by_test_id("answer").nth(1)
    answered.get_by_test_id("feedback-down").click()
    status = answered.get_by_test_id("feedback-status")
    status.filter(has_text=re.compile(".")).wait_for()
    assert status.inner_text() == "pending: the gate learns it once other keys agree (1 of the 2 keys needed)"
