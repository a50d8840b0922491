"""OpenAI's error shape, as the server's middlewares and routes answer with it.

Plain JSON, apart from the request models of ``protocol`` (pydantic): the modules the
command line reads without the ``serve`` extra (``limits``, ``guards``) answer with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def error_body(
    message: str, kind: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


async def send_error(
    send: Any, status: int, message: str, code: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer with an OpenAI-shaped error through an ASGI ``send`` (for middleware, which
    answers before the app)."""
    body = json.dumps(error_body(message, code=code)).encode()
    start_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": body})
