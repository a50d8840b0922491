"""The standalone question a chat turn asks, and the metadata a chat answer carries.

Both chat engines condense a follow-up with the conversation into a standalone
question, which their gate judges; the conversation and the follow-up fill the
condensing prompt through the core's delimiting scheme (``condense_inputs``). A
condensing LLM that fails or says nothing must not end the turn: the message itself is
asked, and why is kept with the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from adaptive_gates.prompts import quote_question, quote_turns

logger = logging.getLogger(__name__)

#: Key of a chat response's ``metadata``: the question the engine was asked (and its
#: gate judged).
QUESTION_KEY = "standalone_question"
#: Key of a chat response's ``metadata``, present when condensing failed: why (the
#: follow-up itself was asked instead).
CONDENSE_ERROR_KEY = "condense_error"


@dataclass(frozen=True)
class Standalone:
    """The question asked for one chat turn, and why condensing failed if it did."""

    question: str
    condense_error: str | None = None


class CondenseInputs(TypedDict):
    """What fills a condensing prompt's two variables."""

    chat_history: str
    question: str


def condense_inputs(history: Sequence[ChatMessage], message: str) -> CondenseInputs:
    """The condensing prompt's ``chat_history`` and ``question``: each turn a
    ``role: "text"`` line (``adaptive_gates.prompts.quote_turns``), the follow-up quoted
    (``adaptive_gates.prompts.quote_question``). LlamaIndex pastes both in as they come,
    so a turn could write a forged ``assistant:`` line of its own."""
    return CondenseInputs(
        chat_history=quote_turns((m.role.value, m.content or "") for m in history), question=quote_question(message)
    )


def condensed(message: str, output: str | Exception) -> Standalone:
    """The condensing step's result (``output``: its text or what it raised), or the
    message itself when it gave none."""
    if isinstance(output, str) and output.strip():
        return Standalone(output.strip())
    reason = f"{type(output).__name__}: {output}" if isinstance(output, Exception) else f"no text ({output!r})"
    logger.warning("condensing the follow-up failed (%s); asking the message itself", reason)
    return Standalone(message, reason)


def turn_metadata(asked: Standalone, answered: Mapping[str, Any] | None) -> dict[str, Any]:
    """A chat answer's ``metadata``: the answer's own (decision and route) with the
    question asked and, when condensing failed, why."""
    metadata = {**(answered or {}), QUESTION_KEY: asked.question}
    if asked.condense_error is not None:
        metadata[CONDENSE_ERROR_KEY] = asked.condense_error
    return metadata


def exchange(message: str, answer: str) -> tuple[ChatMessage, ChatMessage]:
    """The two turns a chat answer adds to memory: the user's message and the answer."""
    return ChatMessage(role=MessageRole.USER, content=message), ChatMessage(role=MessageRole.ASSISTANT, content=answer)
