"""The OpenAPI spec ``adaptive-gates serve`` publishes (``/openapi.json``, ``/docs``), as
the server behaves: FastAPI documents a 422 for every route that reads a request, where
this server answers 400 (OpenAI's status for a request it cannot read), and knows
nothing of the statuses the middlewares answer with. Each route's errors are listed
here, all in OpenAI's error shape, and ``/metrics`` as Prometheus' text."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

_WHY = {
    "400": "a request the server cannot read or honour",
    "401": "no API key, or not one of the server's (when it has keys)",
    "403": "the key's role does not reach the route, or another key's answer",
    "404": "no such decision, lesson or pair",
    "409": "the answer has its verdict, or the lesson was taken back already",
    "413": "the body is larger than the server takes",
    "429": "past the client's rate or feedback quota (see Retry-After)",
    "502": "the upstream LLM failed",
    "503": "the server answers as many requests as it takes, is not ready, is shutting down, or cannot reach the "
    "gate's memory (see Retry-After)",
    "504": "the upstream LLM gave no answer in time",
}
#: One server-sent event of a streamed completion, as clients read it (its fields): the
#: ``data`` is a ``chat.completion.chunk`` object as JSON, or ``[DONE]`` at the end.
_CHUNK = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {"object": {"const": "chat.completion.chunk"}, "choices": {"type": "array"}},
}
_STREAM_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "anyOf": [{"const": "[DONE]"}, {"contentMediaType": "application/json", "contentSchema": _CHUNK}],
        },
    },
}
#: Refusals every route may meet (the Host check and, with keys, the key check).
_ANY_ROUTE = ("400", "401", "403", "429")
_ROUTE_ERRORS: dict[tuple[str, str], tuple[str, ...]] = {
    ("post", "/v1/chat/completions"): ("413", "502", "503", "504"),
    ("post", "/v1/feedback"): ("404", "409", "413", "503"),
    ("post", "/v1/admin/lessons/{decision_id}/revert"): ("404", "409", "503"),
    ("post", "/v1/admin/shadows/{decision_id}/revert"): ("404", "409"),
    ("get", "/readyz"): ("503",),
}


def documented_openapi(app: FastAPI, max_answer_tokens: int) -> dict[str, Any]:
    """``app``'s OpenAPI spec with the statuses the server answers with, a completion's
    two forms (JSON, or server-sent events when streamed) and the longest answer a
    request may ask for (``max_answer_tokens``)."""
    if app.openapi_schema is None:
        spec = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        for path, operations in spec["paths"].items():
            for method, operation in operations.items():
                responses = operation["responses"]
                responses.pop("422", None)
                for status in (*_ANY_ROUTE, *_ROUTE_ERRORS.get((method, path), ())):
                    responses[status] = {
                        "description": _WHY[status],
                        "content": {"application/json": {"schema": _ERROR_SCHEMA}},
                    }
        completion = spec["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]
        completion["content"]["text/event-stream"] = {"schema": _STREAM_EVENT}
        request = spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]
        for field in ("max_tokens", "max_completion_tokens"):
            for form in request[field]["anyOf"]:
                if form.get("type") == "integer":
                    form["maximum"] = max_answer_tokens
        metrics = spec["paths"]["/metrics"]["get"]["responses"]["200"]
        metrics["content"] = {"text/plain": {"schema": {"type": "string"}}}
        spec["components"]["schemas"].pop("HTTPValidationError", None)
        spec["components"]["schemas"].pop("ValidationError", None)
        app.openapi_schema = spec
    return app.openapi_schema
