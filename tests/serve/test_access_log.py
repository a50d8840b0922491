"""One access log line per request, never the question."""

from __future__ import annotations

import logging
import re

from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from adaptive_gates.serve.access import RequireKeys
from adaptive_gates.serve.access_log import AccessLog
from adaptive_gates.serve.keys import KeyRing, key_id

KEY = "chat-key-0123456789abc"


def _app():
    async def answer(request):
        body = await request.json()
        return JSONResponse({"echo": len(body["question"])}, status_code=201)

    async def stream(request):
        async def parts():
            yield b"data: 1\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(parts(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"]), Route("/v1/stream", stream)])


def test_a_line_per_request_with_the_key_id_and_no_question(caplog):
    client = TestClient(AccessLog(RequireKeys(_app(), KeyRing({KEY: "chat"}))))
    question = "What is my secret medical question?"
    with caplog.at_level(logging.INFO, logger="adaptive_gates.serve.access"):
        response = client.post(
            "/v1/chat/completions", json={"question": question}, headers={"authorization": f"Bearer {KEY}"}
        )
        client.post("/v1/chat/completions", json={"question": question})
    assert response.status_code == 201
    lines = [r.getMessage() for r in caplog.records if r.name == "adaptive_gates.serve.access"]
    assert len(lines) == 2
    assert re.fullmatch(rf'testclient key={key_id(KEY)} "POST /v1/chat/completions" 201 \d+ ms', lines[0])
    assert re.fullmatch(r'testclient key=- "POST /v1/chat/completions" 401 \d+ ms', lines[1])
    assert all(question not in line and KEY not in line for line in lines)


def test_a_stream_is_logged_once_it_ends(caplog):
    client = TestClient(AccessLog(_app()))
    with caplog.at_level(logging.INFO, logger="adaptive_gates.serve.access"):
        assert client.get("/v1/stream").text.endswith("[DONE]\n\n")
    (line,) = [r.getMessage() for r in caplog.records if r.name == "adaptive_gates.serve.access"]
    assert '"GET /v1/stream" 200' in line


def test_nothing_is_logged_below_info(caplog):
    client = TestClient(AccessLog(_app()))
    with caplog.at_level(logging.WARNING, logger="adaptive_gates.serve.access"):
        client.get("/v1/stream")
    assert not [r for r in caplog.records if r.name == "adaptive_gates.serve.access"]


def test_control_characters_in_a_request_cannot_write_a_line_of_their_own(caplog):
    client = TestClient(AccessLog(_app()))
    forged = '127.0.0.1 key=- "POST /v1/feedback" 200 1 ms'
    with caplog.at_level(logging.INFO, logger="adaptive_gates.serve.access"):
        client.get(f"/v1/stream%0a{forged}%0d%1b[2J%e2%80%a8%22")
    (line,) = [r.getMessage() for r in caplog.records if r.name == "adaptive_gates.serve.access"]
    assert not any(c in line for c in "\n\r\x1b\u2028")
    assert line.startswith(r'testclient key=- "GET /v1/stream\x0a127.0.0.1 key=- \"POST /v1/feedback\" 200 1 ms')
    assert r'1 ms\x0d\x1b[2J\u2028\"" 404 ' in line
