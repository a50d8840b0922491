"""One log line per request ``adaptive-gates serve`` answers, on the logger
``adaptive_gates.serve.access`` at INFO: the client's address, the key's id (never the
key), the method, the path, the status and the milliseconds. Never a question: what
users ask stays out of the log. Every field is written with its control characters
escaped (``logged``): a path holding ``%0a`` cannot write a line of its own."""

from __future__ import annotations

import logging
import time
from typing import Any

logger = logging.getLogger("adaptive_gates.serve.access")

#: What a logged field shows escaped: the backslash (so an escape is never ambiguous),
#: the quote that delimits the request, the C0 and C1 control characters and DEL, and
#: Unicode's line and paragraph separators.
_ESCAPED = {
    ord("\\"): "\\\\",
    ord('"'): '\\"',
    **{c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]},
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def logged(field: object) -> str:
    """``field`` as the access log writes it: on one line, its control characters escaped."""
    return str(field).translate(_ESCAPED)


class AccessLog:
    """ASGI middleware: the access log line once the response is sent (a stream's when
    its last event is)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not logger.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def noting_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            client = scope.get("client")
            key = scope.get("state", {}).get("api_key_id", "-")
            milliseconds = (time.perf_counter() - started) * 1000
            logger.info(
                '%s key=%s "%s %s" %s %.0f ms',
                logged(client[0] if client else "-"),
                logged(key),
                logged(scope["method"]),
                logged(scope["path"]),
                status or "-",
                milliseconds,
            )
