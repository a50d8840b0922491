"""The HTTP face of ``ChatService``: OpenAI's chat-completions route (streaming and
not), feedback and the lessons it taught, stats, Prometheus metrics, health and
readiness checks, the chat page, and an access log line per request
(``serve.access_log``).

Errors take OpenAI's shape: 401/403 for a missing key or one whose role does not reach
the route (when the server has keys), 400 for a request the server cannot read (code
``context_length_exceeded`` for one past the token limits), 404 for an unknown decision,
403 too for a verdict on another key's answer, 409 for a second verdict on one answer,
413 for a body past its limit, 429 past a client's rate or feedback quota, 503 while
the server answers as many requests as it takes (and for a verdict while the database
holding the gate's memory cannot be reached), 502 when the upstream LLM fails (or
the gate's backend cannot serve it), 504 when the upstream gives no answer in time, and
500 for anything else; the server keeps serving whatever one request does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from typing import Any, TypeVar

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (
    ConversationTooLongError,
    FeedbackNotSupportedError,
    FeedbackRefusedError,
    GateBackendError,
    StateStoreUnavailableError,
    TooManyMessagesError,
    UnknownDecisionError,
    UnknownLessonError,
    UpstreamError,
)
from .access import RequireKeys
from .access_log import AccessLog
from .guards import CheckHost, SecurityHeaders
from .keys import KeyRing
from .limits import LimitBody, LimitInFlight, RateLimit, blocking_threads, client_of
from .openai_error import error_body
from .openapi_spec import documented_openapi
from .protocol import (
    DECISION_HEADER,
    ChatCompletionRequest,
    FeedbackRequest,
    chunk,
    completion,
    decision_header,
    event,
)
from .readiness import Readiness
from .service import AnswerStream, ChatService

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The model name every client may ask for (any other name is accepted as well).
DEFAULT_MODEL_NAME = "default"

#: The chat page's files (package data).
STATIC = files("adaptive_gates.serve") / "static"


def create_app(
    service: ChatService, keys: KeyRing | None = None, allowed_hosts: Iterable[str] | None = None
) -> FastAPI:
    """The ASGI app serving ``service``; with ``keys``, every route but the page and the
    health check needs a key whose role reaches it (``serve.access``); with
    ``allowed_hosts``, requests naming another host are refused (``serve.guards``); the
    service's ``limits`` bound each request and each client (``serve.limits``)."""
    # Every blocking call of a request runs in the server's own executor, sized from
    # ``max_in_flight`` (``limits.blocking_threads``): the loop's default one is smaller
    # than the answers it lets in, and streams waiting for its threads could wedge it.
    executor = ThreadPoolExecutor(blocking_threads(service.limits), thread_name_prefix="adaptive-gates-serve")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # the default executor of the loop that serves: asyncio.to_thread, wherever
        # in the package a request's work calls it, runs there
        asyncio.get_running_loop().set_default_executor(executor)
        yield

    app = FastAPI(
        title="adaptive-gates serve",
        summary="An OpenAI-compatible chat server that retrieves when needed",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.executor = executor
    dependencies = Readiness(service.upstream, service.retriever, service.gate, state=service.state)
    # The last added runs first: the access log, the security headers (on every refusal
    # too), the host, the key, the key's rate, the body's size, the answers in flight.
    limits = service.limits
    app.add_middleware(LimitInFlight, max_in_flight=limits.max_in_flight)
    app.add_middleware(LimitBody, max_bytes=limits.max_body_bytes)
    if limits.requests_per_minute is not None:
        per_minute = limits.requests_per_minute
        buckets = service.state.buckets("requests", per_minute, 60.0)
        app.add_middleware(RateLimit, per_minute=per_minute, buckets=buckets)
    app.add_middleware(RequireKeys, keys=keys or KeyRing())
    if allowed_hosts is not None:
        app.add_middleware(CheckHost, names=allowed_hosts)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(AccessLog)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(exc), param=_validation_param(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own 404 and 405 ({"detail": ...}), in OpenAI's shape
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(error_body(message, code=code), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The log has the exception; the body nothing internal (an address, a path).
        logger.exception("%s %s failed", request.method, request.url.path)
        body = error_body("the server failed; its log says why", "server_error")
        return JSONResponse(body, status_code=500)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        # the asking key alone judges the answer (on a server without keys, anyone may)
        owner = client_of(request.scope) if "api_key_id" in request.scope.get("state", {}) else None
        # any model name is the served model's alias (``default``, a listed name, or
        # one a client was configured with elsewhere): the server answers as one model
        unsupported = body.unsupported_field()
        if unsupported is not None:
            message = f"this server answers with text only and cannot honour {unsupported!r} as set; leave it out"
            return JSONResponse(error_body(message, param=unsupported, code="unsupported_parameter"), status_code=400)
        options = body.answer_options(service.max_tokens)
        if options["max_tokens"] > service.limits.max_answer_tokens:
            return _answer_too_long(body, options["max_tokens"], service.limits.max_answer_tokens)
        try:
            messages = body.chat_messages()
        except ValueError as exc:
            return _error(400, str(exc), param="messages")
        viewer, admin = _viewer(request)
        shown = functools.partial(service.visible_record, viewer=viewer, admin=admin)
        if body.stream:
            return await _streamed(
                service.answer_stream(messages, options, owner), service.model_id, body.include_usage, shown
            )
        try:
            answer = await _unless_client_leaves(request, service.answer(messages, options, owner))
        except (ValueError, GateBackendError, UpstreamError) as exc:
            return _refusal(exc)
        except _ServerStopping:
            message = "server shutting down: the answer was cut at the end of the drain time; retry"
            return JSONResponse(error_body(message, "server_error", code="server_shutting_down"), status_code=503)
        if answer is None:
            return Response(status_code=499)  # nobody reads it: the client left, the generation stopped
        payload = completion(
            _completion_id(answer.decision_id),
            service.model_id,
            answer.text,
            answer.finish_reason,
            shown(answer.record),
            answer.usage,
        )
        return JSONResponse(payload, headers={DECISION_HEADER: decision_header(answer.summary)})

    @app.post("/v1/feedback")
    async def feedback(body: FeedbackRequest, request: Request) -> JSONResponse:
        _, admin = _viewer(request)
        taught = service.feedback(body.decision_id, body.correct, client_of(request.scope), admin=admin)
        return await _teaching(taught, f"no decision {body.decision_id!r} is held (never taken, or too old)")

    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        return service.stats()

    @app.get("/v1/admin/lessons", response_model=None)
    async def lessons(limit: int = Query(50, ge=1, le=1_000)) -> dict[str, Any] | JSONResponse:
        """The latest verdicts the gate learnt from, newest first: what an admin reads to
        see who taught the gate what (e.g. a run of wrong verdicts on one topic)."""
        try:
            recent = service.lessons.recent(limit)
        except StateStoreUnavailableError as exc:
            return JSONResponse(error_body(str(exc), code=exc.code), status_code=exc.status)
        return {"object": "list", "data": [lesson.to_dict() for lesson in recent]}

    @app.post("/v1/admin/lessons/{decision_id}/revert")
    async def revert(decision_id: str) -> JSONResponse:
        """Take back the lesson given on an answer (a poisoned or mistaken verdict): the
        gate withdraws what it learnt from it, and saves as after feedback."""
        return await _teaching(service.revert(decision_id), f"no lesson on decision {decision_id!r} is listed")

    @app.get("/v1/admin/shadows")
    async def shadows(limit: int = Query(50, ge=1, le=1_000)) -> dict[str, Any]:
        """The latest answer pairs the gate learnt from (``serve --shadow-rate``), newest first."""
        recent = [] if service.shadow is None else service.shadow.recent(limit)
        return {"object": "list", "data": [entry.to_dict() for entry in recent]}

    @app.post("/v1/admin/shadows/{decision_id}/revert")
    async def revert_shadow(decision_id: str) -> JSONResponse:
        """Take back the pair recorded on an answer (a broken upstream answer, say): the
        gate withdraws it, refits without it if it had learnt from it, and saves."""
        try:
            entry = None if service.shadow is None else await service.shadow.revert(decision_id)
        except ValueError as exc:
            return JSONResponse(error_body(str(exc), param="decision_id", code="already_reverted"), status_code=409)
        if entry is None:
            return _error(404, f"no pair of decision {decision_id!r} is listed", "decision_id")
        return JSONResponse({"pair": entry.to_dict(), "stats": service.shadow.stats() if service.shadow else None})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The served model under its names (``default`` among them); each entry says, in
        ``adaptive_gates``, the gate and whether it learns from feedback (the page shows
        the thumbs only then)."""
        names = dict.fromkeys([*service.model_names, DEFAULT_MODEL_NAME])
        return {"object": "list", "data": [_model(name, service) for name in names]}

    @app.get("/v1/models/{name:path}", response_model=None)
    async def model(name: str) -> dict[str, Any]:
        return _model(name, service)  # any name is an alias of the served model

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "gate": service.gate.name, "model": service.model_id}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        checks = await dependencies.checks()
        ok = all(state == "ok" for state in checks.values())
        return JSONResponse({"status": "ready" if ok else "not ready", "checks": checks}, 200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    app.openapi = lambda: documented_openapi(app, limits.max_answer_tokens)  # type: ignore[method-assign]
    return app


def _viewer(request: Request) -> tuple[str, bool]:
    """Who asks (``limits.client_of``), and whether as an admin: an admin key, or anyone
    on a server without keys, where every route, the admin's included, is open."""
    state = request.scope.get("state", {})
    admin = state.get("api_role") == "admin" or "api_key_id" not in state
    return client_of(request.scope), admin


async def _streamed(
    stream: AnswerStream, model: str, include_usage: bool, shown: Callable[[dict[str, Any]], dict[str, Any]]
) -> Response:
    """The answer as server-sent events (with ``include_usage``, a last chunk with the
    usage). The first piece is awaited before the response starts, so a request refused,
    or an upstream that fails at once, still gets its status; one that fails later ends
    the stream with an error event."""
    try:
        first = await anext(stream, None)
    except (ValueError, GateBackendError, UpstreamError) as exc:
        return _refusal(exc)
    assert stream.decision_id is not None and stream.summary is not None  # set by the first anext
    completion_id = _completion_id(stream.decision_id)
    headers = {DECISION_HEADER: decision_header(stream.summary)}

    async def events() -> AsyncIterator[bytes]:
        try:
            yield event(chunk(completion_id, model, {"role": "assistant", "content": ""}))
            if first is not None:
                yield event(chunk(completion_id, model, {"content": first}))
                async for piece in stream:
                    yield event(chunk(completion_id, model, {"content": piece}))
        except UpstreamError as exc:
            yield event(error_body(str(exc), "upstream_error"))
            return
        finally:
            await stream.aclose()
        assert stream.record is not None and stream.usage is not None  # set once the last piece was read
        yield event(chunk(completion_id, model, {}, stream.finish_reason, shown(stream.record)))
        if include_usage:
            yield event(chunk(completion_id, model, None, usage=stream.usage))
        yield event("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def _refusal(exc: ValueError | GateBackendError | UpstreamError) -> JSONResponse:
    """The response to an answer refused or failed before its first piece: a request the
    server cannot answer (400), a gate backend or an upstream that fails (502, 504)."""
    if isinstance(exc, ConversationTooLongError):
        return _too_long(exc)
    if isinstance(exc, GateBackendError):
        return JSONResponse(error_body(str(exc), "upstream_error"), status_code=502)
    if isinstance(exc, UpstreamError):
        return _upstream_failure(exc)
    return _error(400, str(exc), param="messages")


async def _unless_client_leaves(request: Request, answer: Coroutine[Any, Any, T]) -> T | None:
    """``answer``'s result; ``None`` when the client disconnects first, and ``answer`` is
    then cancelled (a streamed generation stops at its next token); ``_ServerStopping``
    when the server stops before it (its drain time over). A streamed response needs none
    of this: Starlette cancels it when its client leaves."""
    answering = asyncio.ensure_future(answer)

    async def client_left() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watching = asyncio.ensure_future(client_left())
    try:
        await asyncio.wait({answering, watching}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # the server stops (its drain time is over): so does the answer, and the client
        # is told so at once (uvicorn ends the process soon after), rather than failing
        answering.cancel()
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        raise _ServerStopping from None
    finally:
        watching.cancel()
    if answering.done():
        return answering.result()
    answering.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await answering
    return None


class _ServerStopping(Exception):
    """A plain answer was cut because the server stops (never leaves this module)."""


def _model(name: str, service: ChatService) -> dict[str, Any]:
    extension = {"model": service.model_id, "gate": service.gate.name, "learns_from_feedback": service.learns}
    return {"id": name, "object": "model", "created": 0, "owned_by": "adaptive-gates", "adaptive_gates": extension}


def _completion_id(decision_id: str) -> str:
    return "chatcmpl-" + decision_id.removeprefix("dec-")


async def _teaching(work: Coroutine[Any, Any, dict[str, Any]], unknown: str) -> JSONResponse:
    """What a verdict or a revert answers: its result, or the refusal that says why
    (``unknown``: the message when the decision or lesson it names is not held)."""
    try:
        return JSONResponse(await work)
    except (UnknownDecisionError, UnknownLessonError):
        return _error(404, unknown, "decision_id")
    except FeedbackRefusedError as exc:
        headers = None if exc.retry_after is None else {"Retry-After": str(exc.retry_after)}
        body = error_body(str(exc), param="decision_id", code=exc.code)
        return JSONResponse(body, status_code=exc.status, headers=headers)
    except FeedbackNotSupportedError as exc:
        return _error(400, str(exc))


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, param=param), status_code=status)


def _too_long(exc: ConversationTooLongError) -> JSONResponse:
    code = "too_many_messages" if isinstance(exc, TooManyMessagesError) else "context_length_exceeded"
    return JSONResponse(error_body(str(exc), param="messages", code=code), status_code=400)


def _answer_too_long(body: ChatCompletionRequest, asked: int, most: int) -> JSONResponse:
    param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    message = f"{param} is {asked}; this server writes at most {most} tokens an answer"
    return JSONResponse(error_body(message, param=param, code="invalid_value"), status_code=400)


def _upstream_failure(exc: UpstreamError) -> JSONResponse:
    status = 504 if exc.timed_out else 502
    return JSONResponse(error_body(str(exc), "upstream_error"), status_code=status)


def _validation_message(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'unreadable')})"
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        problems.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(problems)


def _validation_param(exc: RequestValidationError) -> str | None:
    errors = exc.errors()
    if not errors:
        return None
    if errors[0].get("type") == "json_invalid":
        return None
    loc = [str(part) for part in errors[0].get("loc", ()) if part != "body"]
    return ".".join(loc) or None
