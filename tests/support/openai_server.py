"""A real OpenAI-compatible chat-completions server for tests, answering with a local model.

It listens on 127.0.0.1 (ephemeral port) in a background thread and serves
``POST /v1/chat/completions`` and ``GET /v1/models`` in the OpenAI response shapes,
generating with ``LocalChatModel`` (whose token counts it reports as OpenAI's
``usage``), as server-sent events when ``stream`` is asked for. Tests switch it into
fault modes (HTTP 500, a reply slower than the client's timeout, a server that never
answers, malformed JSON, no choices, no content, a reply far longer than asked for,
one whose usage under-reports its length, an empty one, log-probabilities no model
gives) to exercise clients against real HTTP failures and misbehaving servers, and
read how many completion requests arrived to check that retries were bounded.

Every request is handled in a non-daemon thread that ``close`` joins, so no model call
is left running when the interpreter exits (a daemon thread inside torch at exit aborts
the process).

The fixtures ``served_chat_model`` and ``openai_server`` and the checks a framework's
chat model must pass against the server live here too, so the core suite and both
integration suites share them (their conftests import the fixtures by name).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from adaptive_gates import BackendUnavailableError, VerbalizedGate
from adaptive_gates.models import ChatChunk, ChatReply, LocalChatModel, SyncChatModel, TokenLogprob, TokenUsage
from adaptive_gates.records.token_logprobs import tokens_to_openai

log = logging.getLogger(__name__)

#: OpenAI's bound on alternatives per position.
MAX_TOP_LOGPROBS = 20


class Fault(enum.Enum):
    """How the server answers chat-completion requests."""

    NONE = "none"
    ERROR_500 = "error_500"
    SLOW = "slow"
    HANG = "hang"
    MALFORMED_JSON = "malformed_json"
    EMPTY_CHOICES = "empty_choices"
    NO_CONTENT = "no_content"
    #: A server that answers but never gives token log-probabilities.
    NO_LOGPROBS = "no_logprobs"
    #: A server that ignores ``max_tokens``: the model's reply, then "certain" and
    #: 50,000 more characters, with the usage such a reply would cost.
    OVERLONG = "overlong"
    #: ``OVERLONG``'s reply, its usage saying 3 completion tokens and its finish "stop".
    UNDER_REPORTED = "under_reported"
    #: A reply of no text and no tokens.
    EMPTY_REPLY = "empty_reply"
    #: A reply of a newline only, its one token certain.
    BLANK_REPLY = "blank_reply"
    #: The model's reply with every log-probability (each token's and its one
    #: alternative's) replaced by +7, NaN or -inf: values no model gives, which read
    #: as certainty.
    LOGPROB_ABOVE_ZERO = "logprob_above_zero"
    LOGPROB_NAN = "logprob_nan"
    LOGPROB_MINUS_INF = "logprob_minus_inf"
    #: An agent's model, scripted: offered tools, it calls the first one with the last
    #: user message as its first argument, until a tool's result is in the conversation;
    #: then the model answers the question from that result (``tool_turn``).
    CALLS_TOOLS = "calls_tools"
    #: A streamed reply whose first piece is sent at once and the rest only once released
    #: (``release``, ``reset``, ``close``): what reaches a client while the server holds
    #: the rest came through without waiting for it.
    HOLD_AFTER_FIRST_PIECE = "hold_after_first_piece"


class RequestError(Exception):
    """A request the server refuses, with the HTTP status to answer."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ChatCompletionsServer:
    """The server, its fault mode and its request count (both safe to use from tests
    while handler threads run).

    Replies held back (``SLOW``, ``HANG``) are released, as HTTP 503, by ``reset`` and
    ``close``, so a test never leaves a request waiting into the next one; a stream held
    after its first piece (``HOLD_AFTER_FIRST_PIECE``) goes on when released.
    """

    def __init__(self, chat_model: LocalChatModel, *, slow_seconds: float = 2.0) -> None:
        self.chat_model = chat_model
        self.model_id = chat_model.model_id
        self.slow_seconds = slow_seconds
        self._fault = Fault.NONE
        self._requests = 0
        self._model_lists = 0
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._holding = threading.Event()
        self._httpd = _JoiningHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="chat-server", daemon=True)

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> int:
        """Chat-completion requests received since the last ``reset``."""
        with self._lock:
            return self._requests

    @property
    def model_lists(self) -> int:
        """``GET /v1/models`` requests received since the last ``reset``."""
        with self._lock:
            return self._model_lists

    @property
    def holding(self) -> bool:
        """Whether a streamed reply sends its first piece and holds the rest until released
        (``HOLD_AFTER_FIRST_PIECE``)."""
        return self._holding.is_set()

    def release(self) -> None:
        """Let every reply held back go on (or, for ``SLOW`` and ``HANG``, end)."""
        with self._lock:
            self._release.set()
            self._release = threading.Event()

    def set_fault(self, fault: Fault) -> None:
        """Answer later requests in ``fault`` mode."""
        with self._lock:
            self._fault = fault

    def reset(self) -> None:
        """Back to healthy answers and a zero request count; held-back replies are released."""
        with self._lock:
            self._fault = Fault.NONE
            self._requests = 0
            self._model_lists = 0
            self._release.set()
            self._release = threading.Event()
            self._holding.clear()

    def start(self) -> ChatCompletionsServer:
        self._thread.start()
        log.info("chat-completions server for %s at %s", self.model_id, self.base_url)
        return self

    def close(self) -> None:
        """Stop serving and wait for every request in progress: held-back replies are
        released, a reply being generated is finished."""
        with self._lock:
            self._release.set()
        self._httpd.shutdown()
        self._thread.join()
        self._httpd.server_close()  # joins the handler threads

    # ----------------------------------------------------------------- serving
    def _listed(self) -> None:
        with self._lock:
            self._model_lists += 1

    def _arrive(self) -> tuple[Fault, threading.Event]:
        """Count a completion request; the fault mode it is served in and the event
        that releases it if it is held back."""
        with self._lock:
            self._requests += 1
            return self._fault, self._release

    def complete(self, body: object) -> tuple[HTTPStatus, bytes | Iterator[bytes]]:
        """Status and JSON body answering one ``/chat/completions`` request; a streamed
        reply's body is the server-sent events, one ``data:`` line each."""
        fault, release = self._arrive()
        if fault is Fault.ERROR_500:
            return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "injected server error")
        if fault is Fault.HANG:  # accepts the request and never answers it
            release.wait()
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, "released without an answer")
        if fault is Fault.MALFORMED_JSON:
            return HTTPStatus.OK, b'{"id": "chatcmpl-broken", "choices": [{"index": 0, "mess'
        try:
            options = self._options(body)
            if fault is Fault.CALLS_TOOLS and body.get("tools"):
                return self._tool_turn(body, options)
            if options.pop("stream"):
                if fault is Fault.SLOW:
                    release.wait(self.slow_seconds)
                include_usage = options.pop("include_usage")
                events = self._events(self.chat_model.stream(options.pop("messages"), **options), include_usage)
                if fault is Fault.HOLD_AFTER_FIRST_PIECE:
                    events = self._held_after_first(events, release)
                return HTTPStatus.OK, events
            options.pop("include_usage")
            reply = self.chat_model.chat(options.pop("messages"), **options)
        except RequestError as exc:
            return _error(exc.status, str(exc))
        except (TypeError, ValueError) as exc:
            return _error(HTTPStatus.BAD_REQUEST, str(exc))
        # A real reply held back: the model is idle again by the time the client gives up.
        if fault is Fault.SLOW and release.wait(self.slow_seconds):
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, "released before the delay ended")
        misbehave = _MISBEHAVIOURS.get(fault)
        if misbehave is not None:
            reply = misbehave(reply)
        asked = body.get("logprobs") and fault is not Fault.NO_LOGPROBS
        choice = _choice(reply, (body.get("top_logprobs") or 0) if asked else None)
        if fault is Fault.NO_CONTENT:
            choice["message"]["content"] = None
        choices = [] if fault is Fault.EMPTY_CHOICES else [choice]
        return HTTPStatus.OK, _json(
            {
                "id": f"chatcmpl-{time.monotonic_ns()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model_id,
                "choices": choices,
                **({"usage": reply.usage.to_json()} if reply.usage is not None else {}),
            }
        )

    def _options(self, body: object) -> dict[str, Any]:
        """``LocalChatModel.chat`` arguments from a request body, refusing what this
        server does not do the way OpenAI would."""
        if not isinstance(body, dict):
            raise RequestError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
        if body.get("model") != self.model_id:
            raise RequestError(HTTPStatus.NOT_FOUND, f"The model `{body.get('model')}` does not exist.")
        if body.get("n", 1) != 1:
            raise RequestError(HTTPStatus.BAD_REQUEST, "only n=1 is served")
        top = body.get("top_logprobs") or 0
        if not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"top_logprobs must be 0..{MAX_TOP_LOGPROBS}")
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise RequestError(HTTPStatus.BAD_REQUEST, "messages must be a list of objects")
        stop = body.get("stop")
        stream_options = body.get("stream_options") or {}
        return {
            "stream": bool(body.get("stream")),
            "include_usage": isinstance(stream_options, dict) and bool(stream_options.get("include_usage")),
            "messages": messages,
            "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or 64,
            "temperature": body.get("temperature", 1.0),
            # Per-token logprobs come with at least one alternative from the local model.
            "top_logprobs": max(top, 1) if body.get("logprobs") else 0,
            "stop": [stop] if isinstance(stop, str) else stop,
        }

    def _tool_turn(self, body: dict[str, Any], options: dict[str, Any]) -> tuple[HTTPStatus, bytes | Iterator[bytes]]:
        """``CALLS_TOOLS``' reply: a call of the first tool offered with the user's last
        message, or, once a tool's result is in the conversation, the model's answer to
        that message from the result. Streamed as one chunk when asked."""
        messages = options["messages"]
        question = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        results = [_text(m.get("content")) for m in messages if m.get("role") == "tool"]
        if results:
            prompt = f"{results[-1]}\n\nAnswer in a few words: {question}"
            reply = self.chat_model.chat([{"role": "user", "content": prompt}], max_tokens=options["max_tokens"])
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            finish = "stop"
        else:
            tool = body["tools"][0]["function"]
            first = next(iter(tool.get("parameters", {}).get("properties", {})), "input")
            call = {"name": tool["name"], "arguments": json.dumps({first: question})}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{time.monotonic_ns()}", "type": "function", "function": call}],
            }
            finish = "tool_calls"
        head = {"id": f"chatcmpl-{time.monotonic_ns()}", "created": int(time.time()), "model": self.model_id}
        if not options["stream"]:
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return HTTPStatus.OK, _json({**head, "object": "chat.completion", "choices": [choice]})
        delta = dict(message)
        if "tool_calls" in message:  # a streamed call says which of the calls it continues
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        chunk = {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return HTTPStatus.OK, iter([b"data: " + _json(chunk) + b"\n\n", b"data: [DONE]\n\n"])

    def _held_after_first(self, events: Generator[bytes, None, None], release: threading.Event) -> Iterator[bytes]:
        """``events``' first event, then the rest once ``release`` is set."""
        with contextlib.closing(events):  # a client that leaves stops the generation
            first = next(events)
            self._holding.set()  # before the first is sent: a client that reads it finds it set
            yield first
            release.wait()
            self._holding.clear()
            yield from events

    def _events(self, pieces: Iterator[ChatChunk], include_usage: bool = False) -> Generator[bytes, None, None]:
        """The streamed reply as OpenAI's ``chat.completion.chunk`` events, then ``[DONE]``;
        with ``include_usage`` (``stream_options``), a last chunk with no choice and the
        usage, as OpenAI sends it."""
        head = {"id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion.chunk", "model": self.model_id}
        usage = None
        for piece in pieces:
            finish = None
            if piece.reply is not None:
                finish = "length" if piece.reply.finish_reason == "length" else "stop"
                usage = piece.reply.usage
            delta = {"content": piece.text} if piece.text else {}
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            yield b"data: " + _json({**head, "created": int(time.time()), "choices": [choice]}) + b"\n\n"
        if include_usage and usage is not None:
            yield (
                b"data: "
                + _json({**head, "created": int(time.time()), "choices": [], "usage": usage.to_json()})
                + b"\n\n"
            )
        yield b"data: [DONE]\n\n"


def _overlong(reply: ChatReply, completion_tokens: int | None, finish_reason: str) -> ChatReply:
    """``reply``, then "certain" and 50,000 more characters, its usage saying
    ``completion_tokens`` (``None``: what the padding would cost)."""
    padding = " certain" + " and so on" * 5000
    usage = reply.usage and TokenUsage(
        reply.usage.prompt_tokens,
        reply.usage.completion_tokens + 15_000 if completion_tokens is None else completion_tokens,
    )
    return ChatReply(reply.text + padding, None, finish_reason, usage)


def _with_logprobs(reply: ChatReply, logprob: float) -> ChatReply:
    """``reply`` with each token's log-probability, and its one alternative's, ``logprob``."""
    tokens = reply.tokens and tuple(TokenLogprob(t.token, logprob, ((t.token, logprob),)) for t in reply.tokens)
    return dataclasses.replace(reply, tokens=tokens)


def _blank(reply: ChatReply, text: str) -> ChatReply:
    """A reply of ``text`` alone (one certain token, or none for no text)."""
    tokens = (TokenLogprob(text, 0.0, ((text, 0.0),)),) if text else ()
    usage = reply.usage and TokenUsage(reply.usage.prompt_tokens, len(tokens))
    return ChatReply(text, tokens, "stop", usage)


#: How each misbehaving fault rewrites the model's reply.
_MISBEHAVIOURS: dict[Fault, Callable[[ChatReply], ChatReply]] = {
    Fault.OVERLONG: lambda reply: _overlong(reply, None, "length"),
    Fault.UNDER_REPORTED: lambda reply: _overlong(reply, 3, "stop"),
    Fault.EMPTY_REPLY: lambda reply: _blank(reply, ""),
    Fault.BLANK_REPLY: lambda reply: _blank(reply, "\n"),
    Fault.LOGPROB_ABOVE_ZERO: lambda reply: _with_logprobs(reply, 7.0),
    Fault.LOGPROB_NAN: lambda reply: _with_logprobs(reply, math.nan),
    Fault.LOGPROB_MINUS_INF: lambda reply: _with_logprobs(reply, -math.inf),
}


def _choice(reply: ChatReply, top_logprobs: int | None) -> dict[str, Any]:
    """The OpenAI ``choices[0]`` object of ``reply``; logprobs when they were asked for."""
    logprobs = None
    if top_logprobs is not None and reply.tokens is not None:
        logprobs = {"content": tokens_to_openai(reply.tokens, top=top_logprobs, with_bytes=True)}
    return {
        "index": 0,
        "message": {"role": "assistant", "content": reply.text},
        "logprobs": logprobs,
        # The local model tells an end-of-sequence token from a stop string; OpenAI does not.
        "finish_reason": "length" if reply.finish_reason == "length" else "stop",
    }


def _text(content: object) -> str:
    """A message's text: its string, or the text parts of a list of parts."""
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _json(payload: object) -> bytes:
    return json.dumps(payload).encode("utf-8")


def _error(status: HTTPStatus, message: str) -> tuple[HTTPStatus, bytes]:
    """An error in OpenAI's shape."""
    return status, _json({"error": {"message": message, "type": status.phrase, "code": status.value}})


class _JoiningHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server whose ``server_close`` joins its handler threads
    (``ThreadingHTTPServer`` makes them daemons, which it does not join)."""

    daemon_threads = False


def _handler_for(server: ChatCompletionsServer) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to ``server``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                self._send(*_error(HTTPStatus.NOT_FOUND, f"no route {self.path}"))
                return
            server._listed()
            model = {"id": server.model_id, "object": "model", "created": 0, "owned_by": "local"}
            self._send(HTTPStatus.OK, _json({"object": "list", "data": [model]}))

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(*_error(HTTPStatus.NOT_FOUND, f"no route {self.path}"))
                return
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError as exc:
                self._send(*_error(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}"))
                return
            self._send(*server.complete(body))

        def _send(self, status: HTTPStatus, payload: bytes | Iterator[bytes]) -> None:
            if not isinstance(payload, bytes):
                self._stream(payload)
                return
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                log.debug("the client left before the reply (%s)", status)

        def _stream(self, events: Iterator[bytes]) -> None:
            """Server-sent events, each written as it is made; the connection's close ends them."""
            try:
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for event in events:
                    self.wfile.write(event)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                log.debug("the client left during the stream")
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    close()  # stops the generation when the client left early

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


@pytest.fixture(scope="session")
def served_chat_model() -> LocalChatModel:
    """The embedded SmolLM2 as the chat model the test servers answer with, loaded once."""
    chat_model = LocalChatModel()
    _ = chat_model.lm.model  # load before serving, so the first request is not a slow one
    return chat_model


@pytest.fixture
def openai_server(served_chat_model):
    """A real OpenAI-compatible HTTP server on 127.0.0.1 answering with the embedded
    SmolLM2. Each test gets its own: a request another test gave up on (a client still
    retrying past a deadline) must not reach this test's server and be counted as one
    of its requests."""
    server = ChatCompletionsServer(served_chat_model).start()
    yield server
    server.close()


# ---------------------------------------------------------------- what an adapted provider model must do
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
QUESTIONS = ["Who wrote Hamlet?", "What is 2 + 2?", "Name a primary colour.", "Who painted the Mona Lisa?"]


def check_replies_carry_the_servers_logprobs(adapted: SyncChatModel, server: ChatCompletionsServer) -> ChatReply:
    """``adapted`` (a framework's client of ``server``) gives the served model's tokens,
    log-probs and alternatives when asked for them, and none when not."""
    reply = adapted.chat(FRANCE, max_tokens=4, top_logprobs=5)
    direct = server.chat_model.chat(FRANCE, max_tokens=4, top_logprobs=5)
    assert (reply.text, reply.tokens) == (direct.text, direct.tokens)
    assert len(reply.tokens) == 4 and all(len(t.top) == 5 and t.top[0] == (t.token, t.logprob) for t in reply.tokens)
    assert adapted.chat(FRANCE, max_tokens=4).tokens is None  # none asked for, none read
    assert server.requests == 2
    return reply


def check_a_hung_server_is_asked_once_per_batch(
    adapted: SyncChatModel, server: ChatCompletionsServer, path: str, timeout_error: str
) -> None:
    """A gate over ``adapted`` (whose client times out) deciding a batch by ``path``
    (``decide_batch`` or ``adecide_batch``) against a server that never answers sends one
    request, and every decision is the fallback; ``timeout_error`` names the client's class."""
    server.set_fault(Fault.HANG)
    gate = VerbalizedGate(adapted, deadline=120.0)  # the client's timeout ends each request, not the deadline
    decide = getattr(gate, path)
    decisions = asyncio.run(decide(QUESTIONS)) if path.startswith("a") else decide(QUESTIONS)
    assert server.requests == 1
    assert all(d.is_fallback and d.retrieve for d in decisions)
    assert "BackendUnavailableError" in decisions[0].error and timeout_error in decisions[0].error
    assert all("not asked after an earlier request found it unavailable" in d.error for d in decisions[1:])


def check_a_closed_port_is_unavailable(adapted_at: Callable[[str], SyncChatModel], error: str) -> None:
    """A framework's client built by ``adapted_at(base_url)`` for a port nothing listens
    on raises ``BackendUnavailableError`` on both paths, its message naming ``error``."""
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    chat = adapted_at(f"http://127.0.0.1:{port}/v1")
    with pytest.raises(BackendUnavailableError, match=f"failed: {error}: Connection error"):
        chat.chat(FRANCE)
    with pytest.raises(BackendUnavailableError, match=f"failed: {error}: Connection error"):
        asyncio.run(chat.achat(FRANCE))
