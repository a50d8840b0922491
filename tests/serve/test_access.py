"""The key check in front of every route."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from adaptive_gates.serve.access import RequireKeys, needed_role
from adaptive_gates.serve.keys import KeyRing, key_id

CHAT, FEEDBACK, ADMIN = "chat-key-0123456789", "feedback-key-0123456789", "admin-key-0123456789"


def _app():
    async def whoami(request):
        state = request.scope.get("state", {})
        return JSONResponse({"role": state.get("api_role"), "key": state.get("api_key_id")})

    paths = ["/", "/healthz", "/v1/chat/completions", "/v1/feedback", "/v1/stats", "/metrics", "/static/app.js"]
    return Starlette(routes=[Route(p, whoami, methods=["GET", "POST"]) for p in paths])


@pytest.fixture
def client():
    ring = KeyRing({CHAT: "chat", FEEDBACK: "feedback", ADMIN: "admin"})
    return TestClient(RequireKeys(_app(), ring))


@pytest.mark.parametrize(
    ("path", "role"),
    [
        ("/", None),
        ("/healthz", None),
        ("/readyz", None),
        ("/static/app.js", None),
        ("/v1/chat/completions", "chat"),
        ("/v1/models/some-model", "chat"),
        ("/v1/feedback", "feedback"),
        ("/v1/admin/lessons", "admin"),
        ("/metrics", "admin"),
        ("/openapi.json", "admin"),
        ("/unknown", "chat"),
    ],
)
def test_the_role_each_route_needs(path, role):
    assert needed_role(path) == role


def test_public_routes_need_no_key(client):
    assert client.get("/healthz").json() == {"role": None, "key": None}
    assert client.get("/static/app.js").status_code == 200


def test_a_missing_or_unknown_key_is_401(client):
    missing = client.get("/v1/chat/completions")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "invalid_api_key"
    assert "Authorization: Bearer KEY" in missing.json()["error"]["message"]
    wrong = client.get("/v1/chat/completions", headers={"authorization": "Bearer not-a-key-of-this-server"})
    assert wrong.status_code == 401 and "not one of this server's" in wrong.json()["error"]["message"]
    basic = client.get("/v1/chat/completions", headers={"authorization": f"Basic {CHAT}"})
    assert basic.status_code == 401
    assert CHAT not in wrong.text


def test_a_key_reaches_its_role_and_those_below(client):
    def get(path, key):
        return client.get(path, headers={"authorization": f"Bearer {key}"})

    ok = get("/v1/chat/completions", CHAT)
    assert ok.json() == {"role": "chat", "key": key_id(CHAT)}
    assert key_id(CHAT) != CHAT
    forbidden = get("/v1/feedback", CHAT)
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "insufficient_permissions"
    assert "a chat key cannot use /v1/feedback: it needs a feedback key" in forbidden.json()["error"]["message"]
    assert get("/v1/feedback", FEEDBACK).json()["role"] == "feedback"
    assert get("/v1/stats", FEEDBACK).status_code == 403
    for path in ("/v1/chat/completions", "/v1/feedback", "/v1/stats", "/metrics"):
        assert get(path, ADMIN).json()["role"] == "admin"


def test_an_empty_ring_asks_for_no_key():
    client = TestClient(RequireKeys(_app(), KeyRing()))
    assert client.get("/v1/stats").json() == {"role": None, "key": None}
