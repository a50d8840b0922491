"""What the gates that question a chat model share: the backend, robust batch asking
within a deadline, and the saved record of which model the threshold was fitted for."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from ..errors import BackendUnavailableError, GateLoadError
from ..models.chat import ChatModel, ChatReply, Message, chat_each
from ..persistence import check_saved_backend

logger = logging.getLogger(__name__)

#: The default ``deadline``: a little more than one request's full retry cycle at
#: ``OpenAIChatModel``'s defaults (3 attempts of 30 s), so a single question keeps all
#: of its retries and a batch never waits longer than that in all.
DEFAULT_DEADLINE = 120.0

#: The deadline (a ``time.monotonic()`` instant) shared by the requests of one scoring call.
_shared_deadline: ContextVar[float | None] = ContextVar("chat_deadline", default=None)

Score = TypeVar("Score", bound=Callable[..., Any])


class ChatBackend:
    """A gate's chat model (the embedded SmolLM2 unless one is given) and how to ask it.

    ``ask`` never raises: a failing backend becomes the exception in that reply's slot,
    so one bad request costs one fallback decision, not the batch. A backend that
    answers conversation by conversation (a remote server) is asked within
    ``deadline`` seconds for the whole batch (``None``: no deadline); a request that
    finds it unavailable (timed out, unreachable) stops the asking. Either way the
    conversations left without a reply get a ``BackendUnavailableError``. A backend
    that batches in-process (the embedded model) cannot hang and is never cut short.
    """

    def __init__(
        self, chat: ChatModel | None, *, max_workers: int = 1, deadline: float | None = DEFAULT_DEADLINE
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if deadline is not None and (
            not isinstance(deadline, (int, float)) or isinstance(deadline, bool) or not 0 < deadline < math.inf
        ):
            raise ValueError(f"deadline must be a positive number of seconds or None, got {deadline!r}")
        self._chat = chat
        self._lock = threading.Lock()
        self.max_workers = max_workers
        self.deadline = deadline

    @property
    def model(self) -> ChatModel:
        with self._lock:
            if self._chat is None:
                from ..models.chat import LocalChatModel

                self._chat = LocalChatModel()
            return self._chat

    def ask(self, conversations: Sequence[Sequence[Message]], **options: Any) -> list[ChatReply | Exception]:
        """Replies (or the exception each request raised), in order."""
        if not conversations:
            return []
        model = self.model
        batch = getattr(model, "chat_batch", None)
        if not callable(batch):
            return chat_each(model, conversations, max_workers=self.max_workers, deadline=self._deadline(), **options)
        try:
            return list(batch(conversations, **options))
        except BackendUnavailableError as exc:  # the same wait again for each conversation
            return [exc] * len(conversations)
        except Exception:
            logger.warning("batched chat failed; asking one conversation at a time", exc_info=True)
        return chat_each(model, conversations, **options)

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
            from ..models.defaults import SMOLLM2_ID

            check_saved_backend(directory, "state.chat_model", saved, SMOLLM2_ID, "chat model", pass_argument="chat")
        else:
            check_saved_backend(directory, "state.chat_model", saved, self._chat.model_id, "chat model")


def within_one_deadline(score: Score) -> Score:
    """Decorates a chat-backed gate's ``_score``: all the requests made to score one
    batch, follow-up rounds included, share the backend's deadline."""

    @functools.wraps(score)
    def scoring(gate: Any, questions: list[str]) -> Any:
        with gate._backend.shared_deadline():
            return score(gate, questions)

    return scoring  # type: ignore[return-value]


def describe_failure(exc: Exception) -> str:
    """The fallback reason recorded for a failed request."""
    return f"backend error: {type(exc).__name__}: {exc}"
