"""Conversions between LangChain messages and the core's chat turns, and the question a
gate should judge in whatever a chain hands it (a string, a dict, a message list)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, get_args

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    convert_to_messages,
)
from langchain_core.prompt_values import ChatPromptValue, PromptValue, StringPromptValue
from pydantic import Discriminator, Field

# pydantic reads a TypedDict from typing_extensions only, before Python 3.12
from typing_extensions import TypedDict

#: LangChain message type -> the core's chat role.
_ROLE_OF_TYPE = {"system": "system", "human": "user", "ai": "assistant"}
#: The core's chat role -> the LangChain message class.
_CLASS_OF_ROLE: dict[str, type[BaseMessage]] = {
    "system": SystemMessage,
    "user": HumanMessage,
    "assistant": AIMessage,
}


#: The key a dict's question is read from when it lacks the runnable's own question key:
#: ``create_retrieval_chain``'s and most LangChain examples' input key.
INPUT_KEY_ALIAS = "input"


class UnreadableInputError(ValueError):
    """An input that holds no question to judge: a dict without the question's key, a
    message list without a human message, a list that is no message list."""


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
    chat prompt value), else ``None``; ``UnreadableInputError`` for a non-empty list
    that LangChain cannot read as messages."""
    if isinstance(value, PromptValue):
        return value.to_messages()
    if isinstance(value, BaseMessage):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and value:
        try:
            return convert_to_messages(value)
        except (ValueError, NotImplementedError) as exc:  # what LangChain's coercion raises
            # its first line says what is wrong; the rest is a link to its docs
            raise UnreadableInputError(f"the input list is not a message list: {str(exc).splitlines()[0]}") from exc
    return None


def split_conversation(messages: Sequence[BaseMessage]) -> tuple[str, list[BaseMessage]]:
    """The last human turn's text and the messages before it (the history)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].type == "human":
            return messages[i].text, list(messages[:i])
    types = [m.type for m in messages]
    raise UnreadableInputError(f"the message list has no human message to take the question from (types: {types})")


def conversation_of(value: Any, *, input_key: str, history_key: str) -> tuple[Any, list[BaseMessage]]:
    """The current question (as given, not yet validated) and its chat history.

    ``value`` may be the question itself, a message list (the last human turn is the
    question, the turns before it the history), or a dict holding the question (or a
    message list) under ``input_key`` (else under ``"input"``, ``INPUT_KEY_ALIAS``) and
    optionally a history under ``history_key``. Anything else is returned as the
    question, for the gate to refuse.

    Raises:
        UnreadableInputError: ``value`` holds no question to judge (see the class).
    """
    if isinstance(value, Mapping):
        key = question_key(value, input_key)
        if key is None:
            keys = " or ".join(repr(k) for k in dict.fromkeys((input_key, INPUT_KEY_ALIAS)))
            raise UnreadableInputError(f"the input dict has no {keys} key (keys: {sorted(map(str, value))})")
        question, history = conversation_of(value[key], input_key=input_key, history_key=history_key)
        extra = value.get(history_key)
        if extra:
            earlier = as_messages(extra)
            if earlier is None:
                raise UnreadableInputError(
                    f"the input's {history_key!r} is not a message list (got {type(extra).__name__})"
                )
            history = earlier + history
        return question, history
    messages = as_messages(value)
    if messages is not None:
        return split_conversation(messages)
    return value, []


def question_key(value: Mapping[str, Any], input_key: str) -> str | None:
    """The key ``value``'s question is under: ``input_key`` when it is there, else
    ``INPUT_KEY_ALIAS``, else ``None``."""
    return next((key for key in (input_key, INPUT_KEY_ALIAS) if key in value), None)


def _message_type(value: Any) -> str | None:
    """A message's ``type``, or ``None`` (a validation error, not LangChain's own
    discriminator's ``TypeError``) for a value that has none: a role dict, a tuple."""
    kind = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


if TYPE_CHECKING:
    Message = AnyMessage
else:
    #: One LangChain message (``AnyMessage``'s members), picked by its ``type``.
    Message = Annotated[get_args(AnyMessage)[0], Field(discriminator=Discriminator(_message_type))]


class RoleMessage(TypedDict):
    """A message as OpenAI's chat API writes it."""

    role: str
    content: str | list[dict[str, Any]]


#: What LangChain reads as a message (``convert_to_messages``): a message, a role dict,
#: a ``(role, content)`` pair, or a string (a human turn).
MessageLike = Message | RoleMessage | tuple[str, str] | str

#: What a chat model reads (LangChain's ``LanguageModelInput``), as a type whose
#: validation refuses a value of another form with a ``ValidationError``.
ModelInput = str | list[MessageLike] | StringPromptValue | ChatPromptValue


@functools.cache
def input_type(input_key: str, history_key: str) -> Any:
    """The inputs ``conversation_of`` reads, as a type pydantic can validate and turn
    into a JSON schema: a question, a message list (or one message, or a prompt
    value), or a dict with the question under ``input_key`` or ``"input"`` (and
    optionally the chat history under ``history_key``). A value of none of these forms
    is a pydantic ``ValidationError``.

    One type per pair of keys (cached), so runnables reading the same keys have equal
    input types."""
    conversation = Annotated[
        list[MessageLike], Field(description="The chat so far; the last human turn is the question.")
    ]
    question = Annotated[
        str | list[MessageLike], Field(description="The question, or a message list whose last human turn is it.")
    ]
    history = Annotated[list[MessageLike], Field(description="The turns before the question.")]
    keyed = [_keyed_input(key, question, history_key, history) for key in dict.fromkeys((input_key, INPUT_KEY_ALIAS))]
    return ModelInput | conversation | Message | functools.reduce(operator.or_, keyed)


def _keyed_input(key: str, question: Any, history_key: str, history: Any) -> Any:
    """A dict type with the question under ``key`` and optionally the history."""
    # the keys are the caller's, so the dict's type is built with the functional syntax
    name = "GateInputDict" if key != INPUT_KEY_ALIAS else "GateInputDictByInput"
    keyed = TypedDict(name, {key: question, history_key: NotRequired[history]})  # type: ignore[misc]
    keyed.__doc__ = f"A dict with the question under {key!r} and optionally the chat history under {history_key!r}."
    return keyed
