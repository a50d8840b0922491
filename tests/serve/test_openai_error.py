"""OpenAI's error shape, as a body and sent through ASGI by a middleware."""

from __future__ import annotations

import asyncio
import json

from adaptive_gates.serve.openai_error import error_body, send_error


def test_error_body_is_openais_shape():
    assert error_body("bad", param="n") == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "n", "code": None}
    }
    assert error_body("down", "upstream_error")["error"]["type"] == "upstream_error"


def test_send_error_answers_with_status_headers_and_body():
    sent = []

    async def send(message):
        sent.append(message)

    asyncio.run(send_error(send, 401, "no key", "invalid_api_key", [(b"www-authenticate", b"Bearer")]))
    start, body = sent
    assert start["status"] == 401
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json" and headers[b"www-authenticate"] == b"Bearer"
    assert int(headers[b"content-length"]) == len(body["body"])
    assert json.loads(body["body"])["error"] == {
        "message": "no key",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
