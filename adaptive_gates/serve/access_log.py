"""One log line per request ``adaptive-gates serve`` answers, on the logger
``adaptive_gates.serve.access`` at INFO: the client's address, the key's id (never the
key), the method, the path, the status and the milliseconds. Never a question: what
users ask stays out of the log."""

from __future__ import annotations

import logging
import time
from typing import Any

logger = logging.getLogger("adaptive_gates.serve.access")


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
                client[0] if client else "-",
                key,
                scope["method"],
                scope["path"],
                status or "-",
                milliseconds,
            )
