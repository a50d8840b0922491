"""A chat request read for the gate: the last user turn and what comes before it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..answering.history_window import standalone_question
from ..errors import InvalidQuestionError
from ..models.chat.base import Message
from ..records.validation import check_question


@dataclass(frozen=True)
class Turn:
    """One chat request read for the gate.

    Attributes:
        question: the last user message's text.
        earlier: every message before it, as given (system prompts included).
        judged: what the gate judges: the question made standalone, with as many of
            the last ``window`` user questions as it leans on
            (``history_window.standalone_question``).
    """

    question: str
    earlier: list[Message]
    judged: str


def read_turn(messages: Sequence[Message], window: int) -> Turn:
    """The turn of a conversation that ends with a user message.

    Raises:
        ValueError: there is no message, the last one is not the user's, or its text
            holds no visible character (``validation.check_question``).
    """
    if not messages:
        raise ValueError("messages must hold at least one message")
    last = messages[-1]
    if last["role"] != "user":
        raise ValueError(f"the last message must be the user's, got role {last['role']!r}")
    question = last["content"].strip()
    try:
        check_question(question)  # checked, not cut: the answer reads it whole
    except InvalidQuestionError as exc:
        raise ValueError(f"the last user message is no question: {exc}") from None
    earlier = list(messages[:-1])
    asked_before = [m["content"] for m in earlier if m["role"] == "user"]
    return Turn(question, earlier, standalone_question(question, asked_before, window))
