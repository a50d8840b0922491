"""The chat protocol over any OpenAI-compatible chat-completions endpoint.

OpenAI itself, or a server of one's own (vLLM, llama.cpp, Ollama) reached through
``base_url``. Requests go through the official ``openai`` SDK, whose bounded retries with
backoff cover timeouts, connection errors, rate limits and 5xx replies; whatever still
fails, and any reply a gate cannot use, surfaces as ``BackendError`` so the gate can take
its fallback decision. A timeout or a connection failure is a ``BackendUnavailableError``:
the server is down or hung, and the next request would wait the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import AsyncGenerator, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from ...errors import BackendError, BackendUnavailableError
from ...records.token_logprobs import tokens_from_openai
from ...records.validation import check_base_url, check_seconds
from ..optional import require
from .base import ChatOptions, ChatReply, Message, ResolvedChatOptions, TokenLogprob, TokenUsage, check_messages
from .stream import ChatChunk
from .unavailable import is_unavailable

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

#: The key sent to a server given by base URL when no key exists: such servers
#: (vLLM, llama.cpp, Ollama) accept any key, but the SDK insists on one.
PLACEHOLDER_API_KEY = "no-key"


class OpenAIChatModel:
    """``ChatModel`` backed by an OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url=None`` uses ``OPENAI_BASE_URL`` or the SDK's default endpoint; a given
    ``base_url`` must be an http(s) URL with a host (``ValueError`` otherwise, before
    any request);
    ``api_key=None`` uses ``OPENAI_API_KEY`` (or a placeholder when a base URL is set,
    for local servers that need no key). Each request may be retried ``max_retries``
    times with the SDK's backoff, each attempt waiting at most ``timeout`` seconds.
    ``extra_body`` is merged into every request (e.g. vLLM's ``top_k``). One instance can
    be shared by threads and by asyncio tasks. It is a ``StreamingChatModel``: ``stream``
    and ``astream`` hand out the reply as the server sends it.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        check_seconds(timeout, "timeout")
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if base_url is not None:
            check_base_url(base_url)
        require("openai", extra="openai")  # here, not at the first request
        self.model = model
        self.base_url = base_url
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.extra_body = dict(extra_body or {})
        self._api_key = _resolve_api_key(model, api_key, base_url)
        self._lock = threading.Lock()
        self._client: openai.OpenAI | None = None
        # An async HTTP pool belongs to the event loop that opened it: one client per loop.
        self._async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def model_id(self) -> str:
        return self.model

    def chat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply:
        """One assistant reply to ``messages``; bad arguments raise ``ValueError`` before
        anything is sent, failures of the endpoint raise ``BackendError``."""
        request = self._request(messages, options)
        client = self._sync_client()
        with self._failures(client):
            completion = client.chat.completions.create(**request)
        return self._reply(client, completion)

    async def achat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply:
        """``chat`` without blocking the event loop."""
        request = self._request(messages, options)
        client = self._async_client()
        with self._failures(client):
            completion = await client.chat.completions.create(**request)
        return self._reply(client, completion)

    def stream(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> Generator[ChatChunk, None, None]:
        """``chat``'s reply piece by piece as the server streams it (``stream: true``); the
        last piece carries the whole ``ChatReply``, with the usage the server reports
        (asked for with ``stream_options.include_usage``). Closing the generator closes the
        response. Failures raise ``BackendError`` as ``chat``'s do, also mid-stream."""
        request = self._request(messages, options)
        client = self._sync_client()
        with self._failures(client):
            # a last chunk with the usage, counted by the server in its own tokens
            response = client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})
            try:
                reading = _StreamedReply()
                for chunk in response:
                    piece = reading.take(chunk)
                    if piece:
                        yield ChatChunk(piece)
            finally:
                response.close()
        yield ChatChunk("", self._streamed(client, reading))

    async def astream(
        self, messages: Sequence[Message], **options: Unpack[ChatOptions]
    ) -> AsyncGenerator[ChatChunk, None]:
        """``stream`` without blocking the event loop."""
        request = self._request(messages, options)
        client = self._async_client()
        with self._failures(client):
            response = await client.chat.completions.create(
                **request, stream=True, stream_options={"include_usage": True}
            )
            try:
                reading = _StreamedReply()
                async for chunk in response:
                    piece = reading.take(chunk)
                    if piece:
                        yield ChatChunk(piece)
            finally:
                await response.close()
        yield ChatChunk("", self._streamed(client, reading))

    # ------------------------------------------------------------------ clients
    def _sync_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(**self._client_options())
            return self._client

    def _async_client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async_clients.get(loop)
            if client is None:
                import openai

                client = self._async_clients[loop] = openai.AsyncOpenAI(**self._client_options())
            return client

    def _client_options(self) -> dict[str, Any]:
        return dict(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )

    # ------------------------------------------------- requests and responses
    def _request(self, messages: Sequence[Message], options: ChatOptions) -> dict[str, Any]:
        """Validated keyword arguments of ``chat.completions.create``."""
        asked = ResolvedChatOptions(**options)
        request: dict[str, Any] = dict(
            model=self.model,
            messages=check_messages(messages),
            max_tokens=asked.max_tokens,
            temperature=asked.temperature,
        )
        if asked.stops:
            request["stop"] = list(asked.stops)
        if asked.top_logprobs:
            request.update(logprobs=True, top_logprobs=asked.top_logprobs)
        if self.extra_body:
            request["extra_body"] = self.extra_body
        return request

    def _reply(self, client: openai.OpenAI | openai.AsyncOpenAI, completion: object) -> ChatReply:
        """The first choice of ``completion`` as a ``ChatReply``; ``BackendError`` naming
        what is missing when the response is not a usable chat completion."""
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list):
            raise self._error(client, f"the response is not a chat completion: {completion!r:.200}")
        if not choices:
            raise self._error(client, "the response has no choices")
        choice = choices[0]
        text = getattr(getattr(choice, "message", None), "content", None)
        if not isinstance(text, str):
            raise self._error(client, "the response's first choice has no text content")
        entries = getattr(getattr(choice, "logprobs", None), "content", None)
        try:
            tokens = None if entries is None else tokens_from_openai(entries, strict=False)
        except ValueError as exc:
            raise self._error(client, f"malformed logprobs in the response ({exc})") from exc
        usage = TokenUsage.from_openai(getattr(completion, "usage", None))
        return ChatReply(text, tokens, getattr(choice, "finish_reason", None) or "stop", usage)

    def _streamed(self, client: openai.OpenAI | openai.AsyncOpenAI, reading: _StreamedReply) -> ChatReply:
        """The reply a finished stream adds up to; ``BackendError`` for a stream that held
        no chunk at all (a server that answered with something else)."""
        if not reading.chunks:
            raise self._error(client, "the streamed response held no chat.completion.chunk")
        return reading.reply()

    @contextlib.contextmanager
    def _failures(self, client: openai.OpenAI | openai.AsyncOpenAI) -> Iterator[None]:
        """Turn what the SDK raises once its retries are spent into ``BackendError``
        (``BackendUnavailableError`` for a timeout or a connection failure).

        ``ValueError`` covers a body that is not valid JSON, which the SDK lets through.
        """
        import openai

        try:
            yield
        except (openai.OpenAIError, ValueError) as exc:
            kind = BackendUnavailableError if is_unavailable(exc) else BackendError
            raise self._error(client, _cause(exc), kind) from exc

    def _error(
        self,
        client: openai.OpenAI | openai.AsyncOpenAI,
        cause: str,
        kind: type[BackendError] = BackendError,
    ) -> BackendError:
        if len(self._api_key) >= 8:  # a real secret, not a placeholder like "x"
            cause = cause.replace(self._api_key, "***")
        message = (
            f"chat model {self.model!r} at {client.base_url} failed "
            f"(timeout {self.timeout:g} s, max_retries {self.max_retries}): {cause}"
        )
        log.debug(message)
        return kind(message)


class _StreamedReply:
    """The reply a stream of ``chat.completion.chunk`` objects adds up to: its text, its
    tokens' log-probs when the server sends them, its finish reason and usage."""

    def __init__(self) -> None:
        self.chunks = 0
        self.pieces: list[str] = []
        self.tokens: list[TokenLogprob] | None = None
        self.finish_reason = "stop"
        self.usage: TokenUsage | None = None

    def take(self, chunk: object) -> str:
        """Read one chunk; return the text it adds."""
        self.chunks += 1
        self.usage = TokenUsage.from_openai(getattr(chunk, "usage", None)) or self.usage
        choices = getattr(chunk, "choices", None) or []
        if not choices:
            return ""
        choice = choices[0]
        self.finish_reason = getattr(choice, "finish_reason", None) or self.finish_reason
        entries = getattr(getattr(choice, "logprobs", None), "content", None)
        if entries:
            self.tokens = [*(self.tokens or []), *tokens_from_openai(entries, strict=False)]
        piece = getattr(getattr(choice, "delta", None), "content", None)
        if not isinstance(piece, str) or not piece:
            return ""
        self.pieces.append(piece)
        return piece

    def reply(self) -> ChatReply:
        tokens = None if self.tokens is None else tuple(self.tokens)
        return ChatReply("".join(self.pieces), tokens, self.finish_reason, self.usage)


def _resolve_api_key(model: str, api_key: str | None, base_url: str | None) -> str:
    """The key to send: the given one, ``OPENAI_API_KEY``, or a placeholder for a server
    given by URL; with none of them the SDK's default endpoint cannot be used."""
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if key:
        return key
    if base_url or os.environ.get("OPENAI_BASE_URL"):
        return PLACEHOLDER_API_KEY
    raise BackendError(
        f"no API key for chat model {model!r}: pass api_key=, set OPENAI_API_KEY, "
        "or give the base_url of a server that needs no key"
    )


def _cause(exc: Exception) -> str:
    """What went wrong, in words that point at the fix."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "the request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot connect ({exc.__cause__ or exc})"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"
    if isinstance(exc, ValueError):
        return f"malformed JSON in the response ({exc})"
    return f"{type(exc).__name__}: {exc}"
