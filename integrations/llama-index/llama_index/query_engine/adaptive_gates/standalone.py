"""The standalone question a chat turn asks, and the metadata a chat answer carries.

Both chat engines condense a follow-up with the conversation into a standalone
question, which their gate judges; the conversation and the follow-up fill the
condensing prompt through the core's delimiting scheme (``condense_inputs``). A
condensing LLM that fails, says nothing or says something that is no rewording of the
conversation must not end the turn, nor steer the gate: the message itself is asked,
and why is kept with the answer.

The sanity rule (``implausible``): a condensed question is a rewording of the
conversation, so it is refused when it repeats a run of ``REPEATED_RUN`` words (a
generation caught in a loop: "What a great question! What a great"), when one of its
sentences opens as a reply does rather than a question (``CHATTER``: praise of the
question, assent, an offer to help or to explore: "What a great question! Let's
explore", "Sure! Here is ..."; a chatty model's earlier replies put those words in the
history, so sharing words with it proves nothing), or when it has content words (words
that are not function words: names, nouns, verbs, numbers) and none of them occurs in
the message or the chat history (a question about something else: "How tall is the
Eiffel Tower?" after a talk about Hamlet). One shared word is enough, so a condenser
may name what the conversation only pointed at ("When did he die?" after "Who wrote
Hamlet?" becomes "When did William Shakespeare die?").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.selectors.adaptive_gates.gating import asked_question

from adaptive_gates import InvalidQuestionError
from adaptive_gates.extend import is_content_word, quote_question, quote_turns

logger = logging.getLogger(__name__)

#: Key of a chat response's ``metadata``: the question the engine was asked (and its
#: gate judged).
QUESTION_KEY = "standalone_question"
#: Key of a chat response's ``metadata``, present when condensing failed: why (the
#: follow-up itself was asked instead).
CONDENSE_ERROR_KEY = "condense_error"


#: A condensed question repeating a run of this many words is a loop, not a question.
REPEATED_RUN = 3
_WORD = re.compile(r"\w+")
#: The opening of a reply, not of a question: praise of the question ("What a great
#: question", "Good question"), assent or thanks ("Sure", "Certainly", "Thank you"), an
#: offer to help ("I'd be happy to"), or what the reply is about to do ("Let's explore",
#: "Let me explain", "Here is"). Matched at the start of each sentence.
CHATTER = re.compile(
    r"""(?:
        what\s+an?\s+(?:[\w-]+\s+){0,2}(?:question|query|topic|thought|idea)\b
      | (?:(?:a|such\s+a|that\W?s\s+a|that\s+is\s+a)\s+)?
        (?:great|good|excellent|interesting|fascinating|wonderful|fantastic|nice|lovely|thoughtful|fun)
        \s+(?:question|query|one|point)\b
      | let\W?s\b | let\s+(?:us|me)\b
      | sure\b | certainly\b | absolutely\b | of\s+course\b | okay\b | ok\b | alright\b | gladly\b
      | no\s+problem\b | thank\s+you\b | thanks?\b | as\s+an\s+ai\b
      | (?:i\W?d|i\s+would|i\W?m|i\s+am)\s+(?:be\s+)?(?:happy|glad|delighted)\b | happy\s+to\b | glad\s+to\b
      | i\s+(?:can|will|could)\s+(?:help|explain|answer|tell)\b
      | here\s+(?:is|are)\b | here\W?s\b
    )""",
    re.IGNORECASE | re.VERBOSE,
)
#: Where a sentence starts: the text's start, or after ".", "!", "?" or ":" and spaces.
_SENTENCE_START = re.compile(r"(?:^|[.!?:]\s+)\W*")


@dataclass(frozen=True)
class Standalone:
    """The question asked for one chat turn, and why condensing failed if it did."""

    question: str
    condense_error: str | None = None


class CondenseInputs(TypedDict):
    """What fills a condensing prompt's two variables."""

    chat_history: str
    question: str


def chat_message(message: object) -> str:
    """The user's ``message`` to a chat engine, checked before anything else is done
    with it (the chat memory read, a condensing call): the condensed question of an
    empty message would be the LLM's own invention.

    Raises:
        InvalidQuestionError: the message is not a ``str``, or is empty or whitespace
            (``asked_question``'s "the query is empty ..."), with history as without.
    """
    if not isinstance(message, str):
        raise InvalidQuestionError(
            f"the message must be a str, got {type(message).__name__} ({message!r}): pass the user's message as text"
        )
    return asked_question(message)


def condense_inputs(history: Sequence[ChatMessage], message: str) -> CondenseInputs:
    """The condensing prompt's ``chat_history`` and ``question``: each turn a
    ``role: "text"`` line (``adaptive_gates.answering.prompts.quote_turns``), the follow-up quoted
    (``adaptive_gates.answering.prompts.quote_question``). LlamaIndex pastes both in as they come,
    so a turn could write a forged ``assistant:`` line of its own."""
    return CondenseInputs(
        chat_history=quote_turns((m.role.value, m.content or "") for m in history), question=quote_question(message)
    )


def condensed(message: str, output: str | Exception, history: Sequence[ChatMessage]) -> Standalone:
    """The condensing step's result (``output``: its text or what it raised), or the
    message itself when it gave none or an ``implausible`` one given ``history``."""
    if isinstance(output, Exception):
        reason = f"{type(output).__name__}: {output}"
    elif not output.strip():
        reason = f"no text ({output!r})"
    else:
        refused = implausible(output.strip(), [message, *(m.content or "" for m in history)])
        if refused is None:
            return Standalone(output.strip())
        reason = f"the condensed question {output.strip()!r} {refused}"
    logger.warning("condensing the follow-up failed (%s); asking the message itself", reason)
    return Standalone(message, reason)


def implausible(question: str, conversation: Sequence[str]) -> str | None:
    """Why ``question`` is no rewording of ``conversation`` (the message and the chat
    history's texts) by the module's rule, or ``None`` when it passes."""
    words = _WORD.findall(question.lower())
    runs = [" ".join(words[i : i + REPEATED_RUN]) for i in range(len(words) - REPEATED_RUN + 1)]
    looped = next((run for i, run in enumerate(runs) if run in runs[:i]), None)
    if looped is not None:
        return f"repeats {looped!r}"
    for start in _SENTENCE_START.finditer(question):
        chatter = CHATTER.match(question, start.end())
        if chatter is not None:
            return f"is a reply's chatter ({chatter.group(0)!r}), not a question"
    content = [word for word in words if is_content_word(word)]
    said = set(_WORD.findall(" ".join(conversation).lower()))
    if content and said.isdisjoint(content):
        return f"shares none of its content words ({', '.join(content)}) with the conversation"
    return None


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
