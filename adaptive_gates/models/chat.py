"""The chat protocol that prompt-based gates talk to, and its local implementation.

A gate that asks an LLM something (verbalized confidence, SKR prompt/icl) needs
``chat(messages) -> ChatReply`` and its awaitable twin ``achat``. The embedded SmolLM2
implements them here (``achat`` in a worker thread); any OpenAI-compatible server
implements them in ``openai_chat`` (``achat`` natively); LangChain chat models and
LlamaIndex LLMs are adapted to them by the integration packages. An object with only
``chat`` (a ``SyncChatModel``) still serves: ``with_achat`` lends it an ``achat``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import BackendUnavailableError
from ..validation import check_encodable

if TYPE_CHECKING:
    from .local_lm import Generation, LocalCausalLM

log = logging.getLogger(__name__)

#: One chat turn: ``{"role": "system" | "user" | "assistant", "content": text}``.
Message = Mapping[str, str]

_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the most likely alternatives
    at its position (``(token, logprob)``, best first)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class TokenUsage:
    """Tokens a request cost: the prompt read and the completion generated (OpenAI's
    ``usage`` fields). Usages add up, so a run's cost is the sum of its replies'."""

    prompt_tokens: int
    completion_tokens: int

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "completion_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def to_json(self) -> dict[str, int]:
        """OpenAI's ``usage`` object (``total_tokens`` included)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def from_openai(cls, usage: object) -> TokenUsage | None:
        """The usage of an OpenAI-style ``usage`` object or mapping (``prompt_tokens``,
        ``completion_tokens``); ``None`` when it is absent or does not say both counts,
        as with servers that report no usage."""
        if usage is None:
            return None
        read = usage.get if isinstance(usage, Mapping) else functools.partial(getattr, usage)
        try:
            return cls(read("prompt_tokens", None), read("completion_tokens", None))  # type: ignore[call-arg]
        except ValueError:
            return None


@dataclass(frozen=True)
class ChatReply:
    """An assistant reply. ``tokens`` is ``None`` when the backend gives no log-probs,
    ``usage`` when it does not say what the request cost."""

    text: str
    tokens: tuple[TokenLogprob, ...] | None = None
    finish_reason: str = "stop"
    usage: TokenUsage | None = None


@runtime_checkable
class SyncChatModel(Protocol):
    """Anything that answers a conversation with one assistant reply.

    ``temperature=0`` means greedy decoding. ``top_logprobs > 0`` asks for token
    log-probabilities with that many alternatives per position; backends that cannot
    give them return ``tokens=None``. Failures raise ``BackendError``; a backend that
    gives no answer at all (timeout, unreachable) raises ``BackendUnavailableError``.
    """

    @property
    def model_id(self) -> str: ...

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply: ...


@runtime_checkable
class ChatModel(SyncChatModel, Protocol):
    """A ``SyncChatModel`` that can also be awaited: ``achat`` takes ``chat``'s arguments,
    gives the same reply and raises the same errors, without blocking the event loop."""

    async def achat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply: ...


def with_achat(model: SyncChatModel) -> ChatModel:
    """``model`` itself when it has an ``achat``; otherwise a ``ThreadedAsyncChat`` that
    awaits its ``chat`` in a worker thread."""
    if callable(getattr(model, "achat", None)):
        return model  # type: ignore[return-value]  (it has both methods)
    return ThreadedAsyncChat(model)


class ThreadedAsyncChat:
    """The chat protocol over an object that has only ``chat``: ``achat`` runs ``chat``
    in a worker thread, so awaiting it never blocks the event loop."""

    def __init__(self, model: SyncChatModel) -> None:
        self.model = model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r})"

    @property
    def model_id(self) -> str:
        return self.model.model_id

    def chat(self, messages: Sequence[Message], **options: object) -> ChatReply:
        """The wrapped model's reply."""
        return self.model.chat(messages, **options)  # type: ignore[arg-type]

    async def achat(self, messages: Sequence[Message], **options: object) -> ChatReply:
        """The wrapped model's reply, asked from a worker thread."""
        return await asyncio.to_thread(self.model.chat, messages, **options)


def check_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Validated plain-dict copies of ``messages`` (roles known, contents strings)."""
    if isinstance(messages, (str, bytes)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    clean = []
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise ValueError(f"message {i}: role must be one of {_ROLES}, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"message {i}: content must be a str, got {type(content).__name__}")
        check_encodable(content, f"message {i}: content")
        clean.append({"role": role, "content": content})
    return clean


def user(content: str) -> list[dict[str, str]]:
    """A one-message conversation."""
    return [{"role": "user", "content": content}]


def chat_many(
    model: SyncChatModel,
    conversations: Sequence[Sequence[Message]],
    *,
    max_workers: int = 1,
    **options: object,
) -> list[ChatReply]:
    """Replies to many conversations, in order; the first failure is raised.

    A backend with its own ``chat_batch`` (the local LM batches generation) gets the
    whole list; otherwise conversations go out as ``chat_each`` sends them.
    """
    conversations = list(conversations)
    batch = getattr(model, "chat_batch", None)
    if callable(batch):
        return batch(conversations, **options)
    replies = chat_each(model, conversations, max_workers=max_workers, **options)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies  # type: ignore[return-value]  (no exceptions left)


def chat_each(
    model: SyncChatModel,
    conversations: Sequence[Sequence[Message]],
    *,
    max_workers: int = 1,
    deadline: float | None = None,
    **options: object,
) -> list[ChatReply | Exception]:
    """Replies to many conversations, in order, each sent on its own, with each
    failure in its own slot instead of raised.

    Conversations go out one by one, or over ``max_workers`` threads for a remote
    server. Sending stops early, and the conversations without a reply get a
    ``BackendUnavailableError`` saying why, when a request finds the backend
    unavailable (timed out, unreachable: the next request would wait the same way), or
    when ``deadline`` (a ``time.monotonic()`` instant) passes. A request still running
    at the deadline is abandoned to its daemon thread, which the backend's own timeout
    ends; its reply is dropped.
    """
    dispatch = _Dispatch(conversations, model.model_id, max_workers, deadline)
    ask = functools.partial(model.chat, **options)
    if max_workers == 1 and deadline is None:
        dispatch.work(ask)  # nothing to wait for apart from the calls: stay in this thread
    else:
        for n in range(dispatch.workers):
            # Each thread runs in a copy of the caller's context (as asyncio.to_thread
            # does), so what the caller set there (listeners, deadlines) holds in it.
            context = contextvars.copy_context()
            threading.Thread(target=context.run, args=(dispatch.work, ask), name=f"chat-{n}", daemon=True).start()
    return dispatch.wait(deadline)


async def achat_each(
    model: SyncChatModel,
    conversations: Sequence[Sequence[Message]],
    *,
    max_workers: int = 1,
    deadline: float | None = None,
    **options: object,
) -> list[ChatReply | Exception]:
    """``chat_each`` awaited: at most ``max_workers`` requests in flight at once, by the
    same rules (each failure in its slot, no more sending once the backend is found
    unavailable or ``deadline`` passes). Requests still running at the deadline are
    cancelled. A model without ``achat`` is asked in worker threads (``with_achat``).
    """
    dispatch = _Dispatch(conversations, model.model_id, max_workers, deadline)
    ask = functools.partial(with_achat(model).achat, **options)
    workers = [asyncio.ensure_future(dispatch.awork(ask)) for _ in range(dispatch.workers)]
    if not workers:
        return []
    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    try:
        _, late = await asyncio.wait(workers, timeout=timeout)
    finally:
        for worker in workers:  # those still asking at the deadline, or all if the caller is cancelled
            worker.cancel()
    if late:
        await asyncio.wait(late)  # let the cancelled requests close their connections
    return dispatch.results(past_deadline=bool(late))


def _unavailable(result: ChatReply | Exception) -> bool:
    """Whether a failure says the backend is not answering at all."""
    return isinstance(result, (BackendUnavailableError, TimeoutError, ConnectionError))


class _Dispatch:
    """Conversations handed out one at a time to the workers (threads or tasks) that
    ask them, until all are answered, the backend is found unavailable, or the caller
    stops waiting."""

    def __init__(
        self, conversations: Sequence[Sequence[Message]], model_id: str, max_workers: int, deadline: float | None
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self._conversations = list(conversations)
        self._model_id = model_id
        self.workers = min(max_workers, len(self._conversations))
        self._results: list[ChatReply | Exception | None] = [None] * len(self._conversations)
        self._sent = 0
        self._running = 0
        self._stop: BackendUnavailableError | None = None  # why nothing more is sent
        self._late: BackendUnavailableError | None = None  # for requests abandoned at the deadline
        self._deadline = deadline
        self._changed = threading.Condition()

    def work(self, ask: Callable[[Sequence[Message]], ChatReply]) -> None:
        """Ask conversations until none is left to send."""
        while (i := self._take()) is not None:
            try:
                result: ChatReply | Exception = ask(self._conversations[i])
            except Exception as exc:  # one failing request must not take the batch down
                result = exc
            self._put(i, result)

    async def awork(self, ask: Callable[[Sequence[Message]], Awaitable[ChatReply]]) -> None:
        """``work`` for a task: ask conversations until none is left to send."""
        while (i := self._take()) is not None:
            try:
                result: ChatReply | Exception = await ask(self._conversations[i])
            except Exception as exc:  # one failing request must not take the batch down
                result = exc
            self._put(i, result)

    def wait(self, deadline: float | None) -> list[ChatReply | Exception]:
        """The replies once every sent request has ended or ``deadline`` has passed."""
        with self._changed:
            while self._running or (self._stop is None and self._sent < len(self._conversations)):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return self.results(past_deadline=True)
                self._changed.wait(remaining)
            return self.results(past_deadline=False)

    def results(self, *, past_deadline: bool) -> list[ChatReply | Exception]:
        """The replies so far; when the caller stopped waiting at the deadline, sending
        stops and the requests still running are given up."""
        with self._changed:
            if past_deadline:
                self._give_up()
            # Unfilled slots below ``_sent`` were still running at the deadline.
            return [
                result if result is not None else self._late if i < self._sent else self._stop
                for i, result in enumerate(self._results)
            ]  # type: ignore[misc]

    def _give_up(self) -> None:
        """Stop at the deadline: nothing more is sent, and the requests still running are
        abandoned (called under the lock)."""
        if self._late is None:
            self._late = BackendUnavailableError(f"chat model {self._model_id!r} gave no reply before the deadline")
            self._stop = self._stop or self._late
            log.warning("%s; %d request(s) abandoned", self._late, self._running)

    def _take(self) -> int | None:
        with self._changed:
            if self._deadline is not None and self._stop is None and time.monotonic() >= self._deadline:
                self._give_up()  # a request sent now could not be answered in time
            if self._stop is not None or self._sent == len(self._conversations):
                return None
            self._sent += 1
            self._running += 1
            return self._sent - 1

    def _put(self, i: int, result: ChatReply | Exception) -> None:
        with self._changed:
            self._running -= 1
            self._results[i] = result
            if self._stop is None and _unavailable(result):
                self._stop = BackendUnavailableError(
                    f"chat model {self._model_id!r} not asked after an earlier request found it unavailable: {result}"
                )
            self._changed.notify_all()


class LocalChatModel:
    """The chat protocol over a ``LocalCausalLM`` (the embedded SmolLM2 by default).

    Greedy replies of a batch are generated together; ``temperature > 0`` samples
    (plain temperature sampling, seeded by ``seed`` so runs repeat).
    """

    def __init__(self, lm: "LocalCausalLM | None" = None, *, seed: int = 0, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._lm = lm
        self.seed = seed
        self.batch_size = batch_size

    @property
    def lm(self) -> "LocalCausalLM":
        """The wrapped model (the process-wide embedded default when none was given)."""
        if self._lm is None:
            from .defaults import default_llm

            self._lm = default_llm()
        return self._lm

    @property
    def model_id(self) -> str:
        return self.lm.model_id

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply:
        """One assistant reply to ``messages``."""
        return self.chat_batch(
            [messages], max_tokens=max_tokens, temperature=temperature,
            top_logprobs=top_logprobs, stop=stop,
        )[0]

    async def achat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply:
        """``chat`` in a worker thread: generation is in-process work that would
        otherwise hold the event loop."""
        return await asyncio.to_thread(
            self.chat, messages, max_tokens=max_tokens, temperature=temperature,
            top_logprobs=top_logprobs, stop=stop,
        )

    def chat_batch(
        self,
        conversations: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> list[ChatReply]:
        """Replies to many conversations; greedy ones are generated ``batch_size`` at a time."""
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        lm = self.lm
        texts = [lm.format_prompt(check_messages(c)) for c in conversations]
        if temperature > 0:
            # Sampling is per prompt; top_k=0 / top_p=1 leave the distribution unchanged.
            generations = [
                lm.sample(t, 1, temperature=temperature, top_k=0, top_p=1.0,
                          max_new_tokens=max_tokens, seed=self.seed, stop=stop, formatted=True)[0]
                for t in texts
            ]
        else:
            generations = []
            for start in range(0, len(texts), self.batch_size):
                generations.extend(lm.generate(
                    texts[start : start + self.batch_size], max_new_tokens=max_tokens,
                    stop=stop, formatted=True, top_logprobs=top_logprobs,
                ))
        return [self._reply(g, top_logprobs) for g in generations]

    def _reply(self, generation: "Generation", top_logprobs: int) -> ChatReply:
        # Counted by the tokenizer: the prompt as encoded, every token generated (the
        # one that ended generation included, as a server bills it).
        usage = TokenUsage(generation.prompt_tokens, len(generation.token_ids))
        if not top_logprobs or not generation.top_logprobs:
            return ChatReply(generation.text, None, generation.finish_reason, usage)
        decode = self.lm.tokenizer.decode
        tokens = tuple(
            TokenLogprob(
                decode([token_id]),
                logprob,
                tuple((decode([alt]), alt_lp) for alt, alt_lp in top),
            )
            for token_id, logprob, top in zip(
                generation.token_ids, generation.token_logprobs, generation.top_logprobs
            )
        )
        return ChatReply(generation.text, tokens, generation.finish_reason, usage)


def chat_model_or_default(chat_model: object | None) -> ChatModel:
    """``chat_model`` once checked to implement ``ChatModel``, or a ``LocalChatModel``
    over the embedded SmolLM2 when it is ``None``; anything else raises ``TypeError``."""
    backend = chat_model if chat_model is not None else LocalChatModel()
    if not isinstance(backend, ChatModel):
        raise TypeError(f"chat_model must implement the core's ChatModel protocol, got {type(backend).__name__}")
    return backend
