"""What the gate judges in a chat: the last user turn, after a window of the history.

A follow-up ("and when did he die?") is no question on its own; the gate judges it
after the last ``window`` messages of the conversation, one text a line, as the
framework packages do with their ``history_window``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..models.chat import Message

#: The roles whose texts make up the history the gate sees with the question.
HISTORY_ROLES = ("user", "assistant")


def windowed_question(question: str, history: Sequence[str], window: int) -> str:
    """The last ``window`` texts of ``history`` (oldest first) followed by the question,
    one a line; the question alone when the window is 0."""
    turns = [text.strip() for text in history[-window:]] if window else []
    return "\n".join([*filter(None, turns), question])


@dataclass(frozen=True)
class Turn:
    """One chat request read for the gate.

    Attributes:
        question: the last user message's text.
        earlier: every message before it, as given (system prompts included).
        judged: what the gate judges (``windowed_question`` of the question).
    """

    question: str
    earlier: list[Message]
    judged: str


def read_turn(messages: Sequence[Message], window: int) -> Turn:
    """The turn of a conversation that ends with a user message.

    Raises:
        ValueError: there is no message, the last one is not the user's, or its text is
            blank.
    """
    if not messages:
        raise ValueError("messages must hold at least one message")
    last = messages[-1]
    if last["role"] != "user":
        raise ValueError(f"the last message must be the user's, got role {last['role']!r}")
    question = last["content"].strip()
    if not question:
        raise ValueError("the last user message is empty")
    earlier = list(messages[:-1])
    history = [m["content"] for m in earlier if m["role"] in HISTORY_ROLES]
    return Turn(question, earlier, windowed_question(question, history, window))
