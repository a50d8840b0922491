"""The Host check and the browser security headers in front of the server's routes."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from adaptive_gates.serve.guards import LOOPBACK_NAMES, CheckHost, SecurityHeaders, host_name


def _app():
    async def hello(request):
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello), Route("/v1/models", hello)])


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("LocalHost", "localhost"),
        ("[::1]:8000", "::1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("example.com:443", "example.com"),
        ("", ""),
    ],
)
def test_host_names(header, name):
    assert host_name(header) == name


def test_only_the_servers_own_names_are_answered():
    client = TestClient(CheckHost(_app(), LOOPBACK_NAMES), base_url="http://127.0.0.1:8000")
    assert client.get("/").text == "hello"
    assert client.get("/", headers={"host": "localhost:8000"}).status_code == 200
    refused = client.get("/", headers={"host": "attacker.example:8000"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_host"
    named = TestClient(CheckHost(_app(), ["gates.internal:8443"]), base_url="http://gates.internal")
    assert named.get("/").status_code == 200
    assert named.get("/", headers={"host": "localhost"}).status_code == 400


def test_security_headers_on_every_response_and_the_policy_on_the_page():
    client = TestClient(SecurityHeaders(_app()))
    page = client.get("/")
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    api = client.get("/v1/models")
    assert api.headers["x-frame-options"] == "DENY" and "content-security-policy" not in api.headers
    missing = client.get("/nowhere")
    assert missing.status_code == 404 and missing.headers["x-content-type-options"] == "nosniff"
