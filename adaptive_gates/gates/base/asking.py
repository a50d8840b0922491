"""What the gates that question a chat model share: the backend, robust batch asking
within a deadline (blocking or awaited), the scoring written once as rounds of
requests for both, the report of each request to the listeners, and the saved record
of which model the threshold was fitted for."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Unpack

from ...errors import BackendUnavailableError, GateLoadError, MalformedReplyError
from ...models.chat.base import ChatModel, ChatOptions, ChatReply, Message, SyncChatModel, with_achat
from ...models.chat.batch import achat_each, chat_each
from ...persistence.saved_format import check_saved_backend
from ...records.token_logprobs import impossible_logprob
from ...records.validation import MAX_CONCURRENCY, MAX_SECONDS
from .assessment import Assessment
from .constraints import Integer, Real, validate_params
from .driving import adrive, drive
from .listeners import notify_llm_call

logger = logging.getLogger(__name__)

#: The default ``deadline``: a little more than one request's full retry cycle at
#: ``OpenAIChatModel``'s defaults (3 attempts of 30 s), so a single question keeps all
#: of its retries and a batch never waits longer than that in all.
DEFAULT_DEADLINE = 120.0

#: Characters a reply may hold per token asked for, whatever token count the backend
#: reports (a server may under-report it): English runs about 4 a token, and few
#: tokens pass 16.
MAX_CHARS_PER_TOKEN = 32

#: The deadline (a ``time.monotonic()`` instant) shared by the requests of one scoring call.
_shared_deadline: ContextVar[float | None] = ContextVar("chat_deadline", default=None)

Replies = list[ChatReply | Exception]
Scored = Assessment
T = TypeVar("T")

#: What ``ChatBackend`` (and so every chat-backed gate) takes for how it asks.
_ASKING_CONSTRAINTS: dict[str, Any] = {
    "max_workers": Integer(1, MAX_CONCURRENCY),
    "deadline": [Real(0, MAX_SECONDS, closed="right"), None],
}


@dataclass(frozen=True)
class Round:
    """One round of requests a gate's scoring makes: conversations asked with the same
    options, for one ``purpose`` (reported to the listeners)."""

    conversations: list[list[dict[str, str]]]
    purpose: str
    options: ChatOptions


#: A gate's scoring as rounds: it yields each ``Round``, is sent back its replies (or
#: the exception of each failed request), and returns the need scores and evidence.
#: Written once, it is driven by ``ChatBackend.run`` (blocking) and ``arun`` (awaited),
#: through ``adaptive_gates.gates.base.driving``.
Rounds = Generator[Round, Replies, Scored]


class ChatBackend:
    """A gate's chat model (the embedded SmolLM2 unless one is given) and how to ask it.

    ``ask`` (blocking) and ``aask`` (awaited) never raise: a failing backend becomes
    the exception in that reply's slot, so one bad request costs one fallback
    decision, not the batch; each request is reported to the listeners as it ends. A backend that
    answers conversation by conversation (a remote server) is asked within
    ``deadline`` seconds for the whole batch (``None``: no deadline); a request that
    finds it unavailable (timed out, unreachable) stops the asking. Either way the
    conversations left without a reply get a ``BackendUnavailableError``. A backend
    that batches in-process (the embedded model) cannot hang and is never cut short.
    """

    def __init__(
        self, chat: ChatModel | None, *, max_workers: int = 1, deadline: float | None = DEFAULT_DEADLINE
    ) -> None:
        validate_params({"max_workers": max_workers, "deadline": deadline}, _ASKING_CONSTRAINTS)
        self._chat = chat
        self._lock = threading.Lock()
        self.max_workers = max_workers
        self.deadline = deadline

    @property
    def model(self) -> ChatModel:
        with self._lock:
            if self._chat is None:
                from ...models.chat.local import LocalChatModel

                self._chat = LocalChatModel()
            return self._chat

    def ask(
        self, conversations: Sequence[Sequence[Message]], *, purpose: str = "chat", **options: Unpack[ChatOptions]
    ) -> Replies:
        """Replies (or the exception each request raised), in order; each request is
        reported to the listeners under ``purpose``."""
        if not conversations:
            return []
        model = _Reported(self.model, purpose)
        if model.batches:
            replies = self._ask_batched(model, conversations, options)
        else:
            replies = chat_each(
                model, conversations, max_workers=self.max_workers, deadline=self._deadline(), **options
            )
        return trusted(replies, options.get("max_tokens"))

    async def aask(
        self, conversations: Sequence[Sequence[Message]], *, purpose: str = "chat", **options: Unpack[ChatOptions]
    ) -> Replies:
        """``ask`` awaited: at most ``max_workers`` requests in flight, by the same
        deadline and the same stop once the backend is found unavailable. A backend
        that batches in-process generates in a worker thread."""
        if not conversations:
            return []
        model = _Reported(self.model, purpose)
        if model.batches:
            replies = await asyncio.to_thread(self._ask_batched, model, conversations, options)
        else:
            replies = await achat_each(
                model, conversations, max_workers=self.max_workers, deadline=self._deadline(), **options
            )
        return trusted(replies, options.get("max_tokens"))

    @staticmethod
    def _ask_batched(model: _Reported, conversations: Sequence[Sequence[Message]], options: ChatOptions) -> Replies:
        try:
            return list(model.chat_batch(conversations, **options))
        except BackendUnavailableError as exc:  # the same wait again for each conversation
            return [exc] * len(conversations)
        except (ValueError, RuntimeError, MemoryError):
            # One conversation the batch cannot take (ValueError), or the backend failing
            # on the batch as a whole (BackendError, a torch error, memory): one at a time,
            # each failure then costs only its own reply. A bug (TypeError, ...) is raised.
            logger.warning("batched chat failed; asking one conversation at a time", exc_info=True)
        return chat_each(model, conversations, **options)

    def run(self, rounds: Rounds) -> Scored:
        """Drive a gate's scoring, asking each round; all rounds share one deadline."""
        with self.shared_deadline():
            return drive(rounds, lambda r: self.ask(r.conversations, purpose=r.purpose, **r.options))

    async def arun(self, rounds: Rounds) -> Scored:
        """``run`` awaited: requests are awaited, and the gate's own work between them
        (prompts, embeddings, parsing) runs in a worker thread."""
        with self.shared_deadline():
            return await adrive(
                rounds, lambda r: self.aask(r.conversations, purpose=r.purpose, **r.options), resume_in_thread=True
            )

    @contextlib.contextmanager
    def shared_deadline(self) -> Iterator[None]:
        """Every ``ask`` inside the block shares one deadline, counted from its start
        (the rounds of questions of one decision)."""
        if self.deadline is None:
            yield
            return
        instant = time.monotonic() + self.deadline
        outer = _shared_deadline.get()
        token = _shared_deadline.set(instant if outer is None else min(outer, instant))
        try:
            yield
        finally:
            _shared_deadline.reset(token)

    def _deadline(self) -> float | None:
        """The instant by which the current ``ask`` must be done."""
        if self.deadline is None:
            return None
        return _shared_deadline.get() or time.monotonic() + self.deadline

    def state(self) -> dict[str, Any]:
        """The JSON record saved with a gate: the model its threshold belongs to."""
        return {"chat_model": self.model.model_id}

    def check_state(self, directory: Path, state: dict[str, Any]) -> None:
        """Refuse to load a gate calibrated for another chat model."""
        saved = state.get("chat_model")
        if not isinstance(saved, str):
            raise GateLoadError(f"{directory}: field 'state.chat_model' is missing or not a string")
        if self._chat is None:
            from ...models.defaults import SMOLLM2_ID

            check_saved_backend(directory, "state.chat_model", saved, SMOLLM2_ID, "chat model", pass_argument="chat")
        else:
            check_saved_backend(directory, "state.chat_model", saved, self._chat.model_id, "chat model")


class AsksInRounds:
    """Mixin of a chat-backed gate (listed before ``Gate``): ``_score`` and ``_ascore``
    both drive the gate's ``_rounds``, so the blocking and the awaited scoring are one
    piece of logic. The gate keeps ``chat``, ``max_workers`` and ``deadline``, and sets
    ``_chat_backend`` to ``None``; its ``ChatBackend`` is built from them on first use."""

    _parameter_constraints: ClassVar[dict[str, Any]] = _ASKING_CONSTRAINTS
    backend_params: ClassVar[frozenset[str]] = frozenset({"chat"})
    #: How the gate waits on its backend: what it learned does not depend on it.
    _serving_params: ClassVar[frozenset[str]] = frozenset({"fallback_retrieve", "max_workers", "deadline"})
    chat: ChatModel | None
    max_workers: int
    deadline: float | None
    _chat_backend: ChatBackend | None

    if TYPE_CHECKING:  # what the Gate it is mixed into provides (``Gate``)

        def _built_once(self, slot: str, build: Callable[[], T]) -> T: ...

    def _keep_asking(self, chat: ChatModel | None, max_workers: int, deadline: float | None) -> None:
        """Keep, as given, the parameters every chat-backed gate takes (its ``__init__``
        calls this); the backend is built from them on first use."""
        self.chat = chat
        self.max_workers = max_workers
        self.deadline = deadline
        self._chat_backend = None

    @property
    def chat_model(self) -> ChatModel:
        """The chat model asked (the embedded SmolLM2 unless ``chat`` was given)."""
        return self._backend.model

    @property
    def _backend(self) -> ChatBackend:
        """The backend asked, built from the gate's parameters on first use."""
        return self._built_once(
            "_chat_backend", lambda: ChatBackend(self.chat, max_workers=self.max_workers, deadline=self.deadline)
        )

    def _save_state(self, directory: Path) -> dict[str, Any]:
        """What a gate that learns nothing but asks its LLM saves: the record of the chat
        model it was built with (``ChatBackend.state``). A gate with fitted state of its
        own saves it beside this record."""
        return self._backend.state()

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        """Refuse a saved gate whose chat model is not the one given (``ChatBackend.check_state``)."""
        self._backend.check_state(directory, state)

    def _rounds(self, questions: list[str]) -> Rounds:
        """The scoring of validated questions, as rounds of requests."""
        raise NotImplementedError

    def _score(self, questions: list[str]) -> Scored:
        return self._backend.run(self._rounds(questions))

    async def _ascore(self, questions: list[str]) -> Scored:
        return await self._backend.arun(self._rounds(questions))


class _Reported:
    """A chat model whose every request is reported to the listeners as it ends."""

    def __init__(self, model: SyncChatModel, purpose: str) -> None:
        self.model = model
        self.purpose = purpose
        batch = getattr(model, "chat_batch", None)  # an optional method: in-process batching
        self._chat_batch: Callable[..., Iterable[ChatReply]] | None = batch if callable(batch) else None
        self.batches = self._chat_batch is not None

    @property
    def model_id(self) -> str:
        return self.model.model_id

    def chat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply:
        with self._reporting([messages]) as replies:
            replies.append(self.model.chat(messages, **options))
        return replies[0]

    async def achat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply:
        with self._reporting([messages]) as replies:
            replies.append(await with_achat(self.model).achat(messages, **options))
        return replies[0]

    def chat_batch(self, conversations: Sequence[Sequence[Message]], **options: Unpack[ChatOptions]) -> list[ChatReply]:
        with self._reporting(conversations) as replies:
            if self._chat_batch is None:
                raise AttributeError(f"{type(self.model).__name__!r} object has no attribute 'chat_batch'")
            replies.extend(self._chat_batch(conversations, **options))
        return replies

    @contextlib.contextmanager
    def _reporting(self, conversations: Sequence[Sequence[Message]]) -> Iterator[list[ChatReply]]:
        """Times the requests of the block (which fills the list it is given with their
        replies) and reports each, failed (cancelled included) or not; a batch's time is
        shared by its conversations."""
        replies: list[ChatReply] = []
        start = time.perf_counter()
        try:
            yield replies
        except BaseException as exc:
            self._report(conversations, [exc] * len(conversations), start)
            raise
        self._report(conversations, replies, start)

    def _report(
        self, conversations: Sequence[Sequence[Message]], outcomes: Sequence[ChatReply | BaseException], start: float
    ) -> None:
        latency = (time.perf_counter() - start) * 1000 / max(len(conversations), 1)
        for messages, outcome in zip(conversations, outcomes):
            notify_llm_call(self.model_id, self.purpose, messages, outcome, latency)


def trusted(replies: Replies, max_tokens: int | None) -> Replies:
    """``replies`` with each one a gate must not read replaced by a
    ``MalformedReplyError`` naming what is wrong: a reply longer than ``max_tokens``
    (a backend that ignored the cap, or a reply forged to look like a confident
    answer, must not have its text taken as a decision or served as a draft), or one
    holding a log-probability no model could give (``impossible_logprob``)."""
    return [r if isinstance(r, Exception) else _malformation(r, max_tokens) or r for r in replies]


def _malformation(reply: ChatReply, max_tokens: int | None) -> MalformedReplyError | None:
    if max_tokens is not None and (too_long := _length_error(reply, max_tokens)):
        return too_long
    impossible = reply.tokens and impossible_logprob(reply.tokens)
    return MalformedReplyError(f"the reply's {impossible}") if impossible else None


def _length_error(reply: ChatReply, max_tokens: int) -> MalformedReplyError | None:
    """Too long by the most tokens the backend says the reply holds (its usage and its
    log-probs), or by its text at ``MAX_CHARS_PER_TOKEN`` a token: a count can be
    under-reported, the text cannot."""
    counts = [
        *([reply.usage.completion_tokens] if reply.usage is not None else []),
        *([len(reply.tokens)] if reply.tokens is not None else []),
    ]
    counted = max(counts, default=0)
    if counted > max_tokens:
        return MalformedReplyError(f"the reply is {counted} tokens long, more than the {max_tokens} asked for")
    if len(reply.text) <= max_tokens * MAX_CHARS_PER_TOKEN:
        return None
    said = f"; the backend counted {counted} tokens" if counts else ""
    return MalformedReplyError(
        f"the reply is {len(reply.text)} characters long, more than {max_tokens} tokens hold "
        f"(at most {max_tokens * MAX_CHARS_PER_TOKEN}, at {MAX_CHARS_PER_TOKEN} a token{said})"
    )


def describe_failure(exc: Exception) -> str:
    """The fallback reason recorded for a failed request."""
    return f"backend error: {type(exc).__name__}: {exc}"
