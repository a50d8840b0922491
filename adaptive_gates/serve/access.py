"""The key check in front of every route of ``adaptive-gates serve``.

An ASGI middleware (not an HTTP one: streamed answers pass through untouched). A
request without a valid bearer key gets 401, one whose key's role does not reach the
route 403, both in OpenAI's error shape, before the app reads its body. The role of
the key that passed is left in the request's state (``api_role``), with an id of the
key that is not the key (``api_key_id``).
"""

from __future__ import annotations

from typing import Any

from .keys import KeyRing, allows, key_id
from .openai_error import send_error

#: The role each route needs; the page, its files and the health checks need none, and
#: a path not listed needs a chat key (so an unknown path says 404 only to a key).
_ROUTE_ROLES = {
    "/v1/chat/completions": "chat",
    "/v1/models": "chat",
    "/v1/feedback": "feedback",
    "/v1/stats": "admin",
    "/metrics": "admin",
    "/docs": "admin",
    "/docs/oauth2-redirect": "admin",
    "/redoc": "admin",
    "/openapi.json": "admin",
}
_PUBLIC = ("/", "/healthz", "/readyz")
_PUBLIC_PREFIXES = ("/static/",)


def needed_role(path: str) -> str | None:
    """The role ``path`` needs, ``None`` for a public one."""
    if path in _PUBLIC or path.startswith(_PUBLIC_PREFIXES):
        return None
    if path.startswith("/v1/models/"):
        return "chat"
    if path.startswith("/v1/admin/"):
        return "admin"
    return _ROUTE_ROLES.get(path, "chat")


class RequireKeys:
    """ASGI middleware: every non-public route needs a key of ``keys`` with its role."""

    def __init__(self, app: Any, keys: KeyRing) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.keys:
            await self.app(scope, receive, send)
            return
        needed = needed_role(scope["path"])
        if needed is None:
            await self.app(scope, receive, send)
            return
        presented = _bearer(scope)
        role = None if presented is None else self.keys.role_of(presented)
        if presented is None or role is None:
            message = (
                "no API key: send it as the header 'Authorization: Bearer KEY'"
                if presented is None
                else "the API key is not one of this server's"
            )
            await send_error(send, 401, message, "invalid_api_key", [(b"www-authenticate", b"Bearer")])
            return
        if not allows(role, needed):
            message = f"a {role} key cannot use {scope['path']}: it needs a {needed} key"
            await send_error(send, 403, message, "insufficient_permissions")
            return
        state = scope.setdefault("state", {})
        state["api_role"] = role
        state["api_key_id"] = key_id(presented)
        await self.app(scope, receive, send)


def _bearer(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None
