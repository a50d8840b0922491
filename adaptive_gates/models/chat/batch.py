"""Asking a chat model many conversations: in order, over threads or tasks, each
failure in its own slot, stopping once the backend is found unavailable or a deadline
passes."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Unpack

from ...errors import BackendUnavailableError
from .base import ChatOptions, ChatReply, Message, SyncChatModel, with_achat

log = logging.getLogger(__name__)


def chat_many(
    model: SyncChatModel,
    conversations: Sequence[Sequence[Message]],
    *,
    max_workers: int = 1,
    **options: Unpack[ChatOptions],
) -> list[ChatReply]:
    """Replies to many conversations, in order; the first failure is raised.

    A backend with its own ``chat_batch`` (the local LM batches generation) gets the
    whole list; otherwise conversations go out as ``chat_each`` sends them.
    """
    conversations = list(conversations)
    batch = getattr(model, "chat_batch", None)
    if callable(batch):
        return batch(conversations, **options)
    replies: list[ChatReply] = []
    for reply in chat_each(model, conversations, max_workers=max_workers, **options):
        if isinstance(reply, Exception):
            raise reply
        replies.append(reply)
    return replies


def chat_each(
    model: SyncChatModel,
    conversations: Sequence[Sequence[Message]],
    *,
    max_workers: int = 1,
    deadline: float | None = None,
    **options: Unpack[ChatOptions],
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
    **options: Unpack[ChatOptions],
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
            return [result if result is not None else self._missing(i) for i, result in enumerate(self._results)]

    def _missing(self, i: int) -> BackendUnavailableError:
        """Why slot ``i`` has no reply: it was still running at the deadline (below
        ``_sent``), or it was never sent once sending stopped."""
        reason = self._late if i < self._sent else self._stop
        assert reason is not None, "a slot is empty only after sending stopped"
        return reason

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
