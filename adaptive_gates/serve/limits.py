"""What one request, or one client, may cost ``adaptive-gates serve``.

``Limits`` holds the bounds. Three ASGI middlewares enforce those that need no model,
each refusal in OpenAI's error shape: ``LimitBody`` (413 for a body past
``max_body_bytes``, read before the app parses it), ``LimitInFlight`` (503 with
``Retry-After`` beyond ``max_in_flight`` answers at once) and ``RateLimit`` (429 with
``Retry-After`` past ``requests_per_minute``, per key, or per client address on a server
without keys). The service checks the rest: the feedback quota (``TokenBuckets``), and
the token bounds (``check_conversation``) in the answering model's tokens, so a message
of 100,000 characters is refused at once instead of filling memory for minutes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConversationTooLongError, StateStoreUnavailableError, TooManyMessagesError
from ..models.chat.base import Message
from .openai_error import send_error

#: UTF-8 bytes a token at most, where the answering model's tokenizer is not at hand:
#: BPE tokenizers pack English at about four, so the estimate errs toward refusing.
BYTES_PER_TOKEN_ESTIMATE = 3

logger = logging.getLogger(__name__)


def limit(default: int | None, flag: str, help: str, *, command_default: int | None = None) -> Any:
    """A field of ``Limits`` with what ``adaptive-gates serve`` makes of it: its ``flag``,
    the ``help`` text (without the default, which is added) and, for a bound that is off
    by default here (``None``), the ``command_default`` the command sets it to (0 on the
    command line: off)."""
    return field(default=default, metadata={"flag": flag, "help": help, "command_default": command_default})


@dataclass(frozen=True)
class Limits:
    """The bounds on a request and on a client.

    Attributes:
        max_body_bytes: the largest request body.
        max_message_tokens: the longest message, in the answering model's tokens.
        max_conversation_tokens: the longest conversation (every message).
        max_messages: the most messages a conversation may hold (more: 400).
        max_answer_tokens: the most tokens a request may ask an answer to be
            (``max_tokens``); more gets 400.
        max_in_flight: chat requests answered at once; more get 503.
        requests_per_minute: requests a key (or, without keys, an address) may send a
            minute, in bursts up to the same number; ``None``: no limit.
        feedback_per_hour: verdicts a key (or an address) may give an hour; ``None``:
            no limit.

    Each field's metadata gives the command's flag for it (``limit``): a new bound is
    one line here.
    """

    max_body_bytes: int = limit(1_000_000, "--max-body-bytes", "the largest request body; larger gets 413")
    max_message_tokens: int = limit(
        2_000,
        "--max-message-tokens",
        "the longest message, in the answering model's tokens (estimated at 3 bytes a token for a remote one); "
        "longer gets 400 context_length_exceeded",
    )
    max_conversation_tokens: int = limit(
        4_000, "--max-conversation-tokens", "the longest conversation, every message counted"
    )
    max_messages: int = limit(
        256, "--max-messages", "the most messages a request's conversation may hold; more gets 400"
    )
    max_answer_tokens: int = limit(
        1_024,
        "--max-answer-tokens",
        "the most tokens a request may ask an answer to be (max_tokens); more gets 400, and --max-tokens may not "
        "be more",
    )
    max_in_flight: int = limit(8, "--max-in-flight", "chat requests answered at once; more get 503 with Retry-After")
    requests_per_minute: int | None = limit(
        None,
        "--rate-limit",
        "requests a minute an API key (without keys: a client address) may send to /v1/, in bursts up to as many; "
        "more get 429 with Retry-After; 0: no limit",
        command_default=120,
    )
    feedback_per_hour: int | None = limit(
        None,
        "--feedback-per-hour",
        "verdicts an API key (without keys: a client address) may give an hour; more get 429; 0: no limit",
        command_default=60,
    )

    def __post_init__(self) -> None:
        bounds = [
            self.max_body_bytes,
            self.max_message_tokens,
            self.max_conversation_tokens,
            self.max_messages,
            self.max_answer_tokens,
            self.max_in_flight,
        ]
        rates = [rate for rate in (self.requests_per_minute, self.feedback_per_hour) if rate is not None]
        if any(bound < 1 for bound in [*bounds, *rates]):
            raise ValueError(f"every limit must be >= 1, got {self}")


#: Worker threads one answer in flight may hold at once: a stream's read of its next
#: piece, left blocked until the generation stops when its client leaves, and the close
#: that stops it (a plain answer holds one: the gate's scoring, the retrieval or the
#: generation, in turn).
THREADS_PER_ANSWER = 2
#: Worker threads beyond the answers': readiness checks, verdicts and the saves after
#: them, shadow learning, answers just refused or cut whose threads are still ending.
HEADROOM_THREADS = 8


def blocking_threads(limits: Limits) -> int:
    """The size of the server's executor, which runs every blocking call of a request
    (``asyncio.to_thread`` and the like: the gate's scoring, retrieval, the embedded
    model's pieces). This is where it meets ``max_in_flight``: sized from it, the
    executor always has a thread for every answer ``LimitInFlight`` lets in, so no
    number of concurrent streams can wait on one another for a thread (the event loop's
    own default holds ``min(32, cores + 4)``, fewer than 8 answers need on 2 cores)."""
    return limits.max_in_flight * THREADS_PER_ANSWER + HEADROOM_THREADS


def token_counter(model: object) -> Callable[[str], int]:
    """How ``model`` counts a text's tokens: its own ``count_tokens`` when it has one
    (the embedded model's tokenizer), else an estimate from the UTF-8 length."""
    count = getattr(model, "count_tokens", None)
    if callable(count):
        return count
    return lambda text: math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN_ESTIMATE)


def check_conversation(messages: Sequence[Message], limits: Limits, count: Callable[[str], int]) -> None:
    """Raise ``ConversationTooLongError`` for a message or a conversation past ``limits``
    (more messages than ``max_messages``, or more tokens). A text far past the bound is
    refused by its length alone, before it is tokenized. The conversation's refusal says
    to start a new one: a chat kept past the bound fails every next question too."""
    if len(messages) > limits.max_messages:
        raise TooManyMessagesError(
            f"the conversation holds {len(messages)} messages; this server takes {limits.max_messages}: "
            "start a new chat (send fewer earlier turns)"
        )
    total = 0
    for i, message in enumerate(messages):
        tokens = _message_tokens(message["content"], limits.max_message_tokens, count)
        if tokens is None or tokens > limits.max_message_tokens:
            size = f"more than {limits.max_message_tokens}" if tokens is None else str(tokens)
            raise ConversationTooLongError(
                f"message {i} is {size} tokens; this server takes {limits.max_message_tokens} a message"
            )
        total += tokens
    if total > limits.max_conversation_tokens:
        raise ConversationTooLongError(
            f"the conversation is {total} tokens; this server takes {limits.max_conversation_tokens} a conversation: "
            "start a new chat (send fewer earlier turns)"
        )


#: A token is rarely longer than this many characters: a text longer than this many
#: times a bound is past it without tokenizing it.
_LONGEST_TOKEN_CHARS = 16


def _message_tokens(text: str, bound: int, count: Callable[[str], int]) -> int | None:
    """The text's tokens; ``None`` when its length alone puts it past ``bound`` (tokenizing
    megabytes would be the very cost refused)."""
    return None if len(text) > bound * _LONGEST_TOKEN_CHARS else count(text)


class LimitBody:
    """ASGI middleware: a body past ``max_bytes`` gets 413 before the app reads any of it."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", ())).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._refuse(send)
                return
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict[str, Any]:
            # the body once, whole; then what the client does next (a disconnect)
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any) -> None:
        message = f"the request body is larger than this server takes ({self.max_bytes} bytes)"
        await send_error(send, 413, message, "request_too_large")


#: The routes whose requests count as answers in flight.
_ANSWERING = ("/v1/chat/completions",)


class LimitInFlight:
    """ASGI middleware: beyond ``max_in_flight`` chat requests at once (a stream counts
    until its last event is sent), another gets 503 with ``Retry-After``."""

    def __init__(self, app: Any, max_in_flight: int) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in _ANSWERING:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            message = f"the server is answering {self.max_in_flight} requests, as many as it takes at once; retry soon"
            await send_error(send, 503, message, "server_overloaded", [(b"retry-after", b"1")])
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class TokenBuckets:
    """A token bucket per client: ``per_period`` requests every ``period`` seconds, in
    bursts of up to as many; safe from many threads."""

    #: Clients remembered before those whose buckets are full again are forgotten.
    MAX_CLIENTS = 10_000

    def __init__(self, per_period: int, period: float, clock: Callable[[], float] = time.monotonic) -> None:
        if per_period < 1 or not period > 0:
            raise ValueError(f"per_period must be >= 1 and period > 0, got {per_period} and {period}")
        self.per_period = per_period
        self.period = period
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, when)
        self._lock = threading.Lock()

    def take(self, client: str) -> int:
        """Take one from ``client``'s bucket: 0 to go ahead, or, when it is empty, the
        whole seconds until it holds one again."""
        with self._lock:
            now = self.clock()
            rate = self.per_period / self.period
            tokens, then = self._buckets.get(client, (float(self.per_period), now))
            tokens = min(float(self.per_period), tokens + (now - then) * rate)
            if tokens < 1:
                self._buckets[client] = (tokens, now)
                return math.ceil((1 - tokens) / rate)
            self._buckets[client] = (tokens - 1, now)
            if len(self._buckets) > self.MAX_CLIENTS:
                # an untouched bucket is full again after a period: forgetting it changes nothing
                self._buckets = {c: b for c, b in self._buckets.items() if now - b[1] < self.period}
            return 0


class RateLimit:
    """ASGI middleware: ``per_minute`` requests a minute per key (the ``api_key_id`` the
    key check left), or per client address on a server without keys, over the ``/v1/``
    routes; past it, 429 with ``Retry-After``. ``buckets``: where they are counted (shared
    by several servers, ``serve.state``); while those cannot be reached, requests go on."""

    def __init__(
        self, app: Any, per_minute: int, clock: Callable[[], float] = time.monotonic, buckets: Any = None
    ) -> None:
        self.app = app
        self.per_minute = per_minute
        self.buckets = buckets if buckets is not None else TokenBuckets(per_minute, 60.0, clock)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        try:
            if isinstance(self.buckets, TokenBuckets):
                wait = self.buckets.take(client_of(scope))
            else:  # over the network: off the event loop
                wait = await asyncio.to_thread(self.buckets.take, client_of(scope))
        except StateStoreUnavailableError:  # answers go on without the shared count
            logger.warning("the rate limit is not counted: the state store is unreachable")
            wait = 0
        if wait > 0:
            message = f"more than {self.per_minute} requests a minute; retry in {wait} s"
            await send_error(send, 429, message, "rate_limit_exceeded", [(b"retry-after", str(wait).encode())])
            return
        await self.app(scope, receive, send)


def client_of(scope: Mapping[str, Any]) -> str:
    """Who sent a request: its API key's id, or, on a server without keys, its address."""
    key = scope.get("state", {}).get("api_key_id")
    if key is not None:
        return f"key:{key}"
    client = scope.get("client")
    return f"address:{client[0] if client else 'unknown'}"
