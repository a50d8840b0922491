"""Two ASGI middlewares in front of ``adaptive-gates serve``'s routes.

``CheckHost`` answers only requests whose ``Host`` header names the server by one of
its names: a page on another site that points a name of its own at 127.0.0.1 (DNS
rebinding) reaches a loopback server, but with its own name in ``Host``.
``SecurityHeaders`` puts the headers a browser honours on every response: no MIME
sniffing, no framing, no referrer, and on the page a content policy that allows its own
files only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .openai_error import send_error

#: The names a loopback server answers to unless told others.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")

_COMMON_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
#: The page loads its own script and stylesheet; scores are drawn by setting styles from
#: that script, which a policy without 'unsafe-inline' allows.
_PAGE_POLICY = (
    b"content-security-policy",
    b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    b"form-action 'self'; frame-ancestors 'none'",
)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port and an IPv6 address' brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class CheckHost:
    """ASGI middleware: 400, in OpenAI's shape, for a ``Host`` not in ``names``."""

    def __init__(self, app: Any, names: Iterable[str]) -> None:
        self.app = app
        self.names = frozenset(host_name(name) for name in names)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers", ()))
            host = host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in self.names:
                message = "this server does not answer for the name in the Host header"
                await send_error(send, 400, message, "invalid_host")
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """ASGI middleware: the browser security headers on every HTTP response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = _COMMON_HEADERS + ([_PAGE_POLICY] if scope["path"] == "/" else [])

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)
