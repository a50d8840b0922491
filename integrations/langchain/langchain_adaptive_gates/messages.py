"""Conversions between LangChain messages and the core's chat turns, and the question a
gate should judge in whatever a chain hands it (a string, a dict, a message list)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    convert_to_messages,
)
from langchain_core.prompt_values import PromptValue

#: LangChain message type -> the core's chat role.
_ROLE_OF_TYPE = {"system": "system", "human": "user", "ai": "assistant"}
#: The core's chat role -> the LangChain message class.
_CLASS_OF_ROLE: dict[str, type[BaseMessage]] = {
    "system": SystemMessage,
    "user": HumanMessage,
    "assistant": AIMessage,
}


def to_core_messages(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """``{"role", "content"}`` turns for the core's chat protocol.

    Only system, human and AI turns have a place there; a tool or function message
    raises ``ValueError`` naming its position and type.
    """
    turns = []
    for i, message in enumerate(messages):
        role = _ROLE_OF_TYPE.get(message.type)
        if role is None:
            raise ValueError(
                f"message {i} is a {message.type!r} message; only system, human and ai messages "
                "can be sent to an adaptive-gates chat model"
            )
        turns.append({"role": role, "content": message.text})
    return turns


def from_core_messages(messages: Sequence[Mapping[str, str]]) -> list[BaseMessage]:
    """LangChain messages for the core's ``{"role", "content"}`` turns."""
    out = []
    for i, turn in enumerate(messages):
        cls = _CLASS_OF_ROLE.get(turn.get("role", ""))
        if cls is None:
            raise ValueError(f"message {i}: role must be one of {tuple(_CLASS_OF_ROLE)}, got {turn.get('role')!r}")
        out.append(cls(content=turn.get("content", "")))
    return out


def as_messages(value: Any) -> list[BaseMessage] | None:
    """``value`` as a message list when it is one (messages, tuples, message dicts, a
    chat prompt value), else ``None``."""
    if isinstance(value, PromptValue):
        return value.to_messages()
    if isinstance(value, BaseMessage):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and value:
        return convert_to_messages(value)
    return None


def split_conversation(messages: Sequence[BaseMessage]) -> tuple[str, list[BaseMessage]]:
    """The last human turn's text and the messages before it (the history)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].type == "human":
            return messages[i].text, list(messages[:i])
    raise ValueError("the message list has no human message to take the question from")


def conversation_of(value: Any, *, question_key: str, history_key: str) -> tuple[Any, list[BaseMessage]]:
    """The current question (as given, not yet validated) and its chat history.

    ``value`` may be the question itself, a message list (the last human turn is the
    question, the turns before it the history), or a dict holding the question (or a
    message list) under ``question_key`` and optionally a history under ``history_key``.
    """
    if isinstance(value, Mapping):
        if question_key not in value:
            raise ValueError(f"the input dict has no {question_key!r} key (keys: {sorted(map(str, value))})")
        question, history = conversation_of(value[question_key], question_key=question_key, history_key=history_key)
        extra = value.get(history_key)
        if extra:
            history = (as_messages(extra) or []) + history
        return question, history
    messages = as_messages(value)
    if messages is not None:
        return split_conversation(messages)
    return value, []
