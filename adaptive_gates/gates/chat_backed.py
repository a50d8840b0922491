"""What the gates that question a chat model share: the backend, robust batch asking,
and the saved record of which model the threshold was fitted for."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import GateLoadError
from ..models.chat import ChatModel, ChatReply, Message, chat_many

logger = logging.getLogger(__name__)


class ChatBackend:
    """A gate's chat model (the embedded SmolLM2 unless one is given) and how to ask it.

    ``ask`` never raises: a failing backend becomes the exception in that reply's slot,
    so one bad request costs one fallback decision, not the batch.
    """

    def __init__(self, chat: ChatModel | None, *, max_workers: int = 1) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self._chat = chat
        self._lock = threading.Lock()
        self.max_workers = max_workers

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
        try:
            return list(chat_many(self.model, conversations, max_workers=self.max_workers, **options))
        except Exception:
            logger.warning("batched chat failed; asking one conversation at a time", exc_info=True)
        replies: list[ChatReply | Exception] = []
        for conversation in conversations:
            try:
                replies.append(self.model.chat(conversation, **options))
            except Exception as exc:  # a failing backend must not take the batch down
                replies.append(exc)
        return replies

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

            if saved != SMOLLM2_ID:
                raise GateLoadError(
                    f"{directory}: this gate was saved with chat model {saved!r}; pass chat= with that model"
                )
        elif self._chat.model_id != saved:
            raise GateLoadError(
                f"{directory}: field 'state.chat_model' is {saved!r} but the given chat model is "
                f"{self._chat.model_id!r}"
            )


def describe_failure(exc: Exception) -> str:
    """The fallback reason recorded for a failed request."""
    return f"backend error: {type(exc).__name__}: {exc}"
