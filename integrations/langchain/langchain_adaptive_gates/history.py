"""What a gate judges in a chat: the question made standalone by the core's rule (with
the earlier questions it leans on), or the follow-up rewritten by an LLM.

"And when did he die?" alone gives a gate nothing to go on; after "Who wrote Hamlet?"
it is a question about Shakespeare, and the gate should judge that one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda

# pydantic reads a TypedDict from typing_extensions only, before Python 3.12
from typing_extensions import TypedDict

from adaptive_gates.extend import quote_question, quote_turns, standalone_question

from .messages import MessageLike

#: LangChain's classic condense-question instruction.
CONDENSE_INSTRUCTION = (
    "Given the chat history and the follow-up question below, rephrase the follow-up "
    "question to be a standalone question that can be understood without the chat "
    "history. Do NOT answer it; reply with the standalone question only."
)


#: The condensing prompt: the history and the follow-up fill it through the core's
#: delimiting scheme (``condense_inputs``), never as they come.
CONDENSE_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", CONDENSE_INSTRUCTION),
        ("human", "Chat history:\n{chat_history}\nFollow-up question: {question}\nStandalone question:"),
    ]
)


class CondenseInput(TypedDict):
    """The condenser's input: the turns before the follow-up, and the follow-up."""

    chat_history: list[MessageLike]
    question: str


def condense_question_chain(llm: BaseChatModel) -> Runnable:
    """A runnable that turns ``{"chat_history": [messages], "question": str}`` into a
    standalone question (a string), with LangChain's condense-question instruction; the
    history is written as one quoted line per turn and the follow-up quoted
    (``condense_inputs``), so no turn can close its line or forge another's."""
    render = RunnableLambda(condense_inputs)
    chain: Runnable[Any, str] = (render | CONDENSE_PROMPT | llm | StrOutputParser()).with_config(
        run_name="condense_question"
    )
    return chain.with_types(input_type=CondenseInput)


def condense_inputs(inputs: dict[str, Any]) -> dict[str, str]:
    """``CONDENSE_PROMPT``'s variables from ``{"chat_history": [messages], "question": str}``
    (the messages in any form LangChain reads as messages): each message a
    ``type: "text"`` line (``adaptive_gates.answering.prompts.quote_turns``), the question quoted
    (``adaptive_gates.answering.prompts.quote_question``)."""
    history: Sequence[BaseMessage] = convert_to_messages(inputs["chat_history"])
    return {
        "chat_history": quote_turns((m.type, m.text) for m in history),
        "question": quote_question(inputs["question"]),
    }


def standalone_from_history(question: str, history: Sequence[BaseMessage], window: int) -> str:
    """The question made standalone with as many of the last ``window`` human questions
    of ``history`` as it leans on (``adaptive_gates.answering.history_window``): the AI's replies
    and system messages are never judged."""
    return standalone_question(question, [m.text for m in history if m.type == "human"], window)
