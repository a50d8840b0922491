"""What a gate judges in a chat: the question made standalone by the core's rule (with
the earlier questions it leans on), or the follow-up rewritten by an LLM.

"And when did he die?" alone gives a gate nothing to go on; after "Who wrote Hamlet?"
it is a question about Shakespeare, and the gate should judge that one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable

# pydantic reads a TypedDict from typing_extensions only, before Python 3.12
from typing_extensions import TypedDict

from adaptive_gates.extend import standalone_question

from .messages import MessageLike

#: LangChain's classic condense-question instruction.
CONDENSE_INSTRUCTION = (
    "Given the chat history and the follow-up question below, rephrase the follow-up "
    "question to be a standalone question that can be understood without the chat "
    "history. Do NOT answer it; reply with the standalone question only."
)


class CondenseInput(TypedDict):
    """The condenser's input: the turns before the follow-up, and the follow-up."""

    chat_history: list[MessageLike]
    question: str


def condense_question_chain(llm: BaseChatModel) -> Runnable:
    """A runnable that turns ``{"chat_history": [messages], "question": str}`` into a
    standalone question (a string), with LangChain's condense-question prompt."""
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", CONDENSE_INSTRUCTION),
            MessagesPlaceholder("chat_history"),
            ("human", "Follow-up question: {question}\nStandalone question:"),
        ]
    )
    chain: Runnable[Any, str] = (prompt | llm | StrOutputParser()).with_config(run_name="condense_question")
    # the history in any form the prompt reads as messages (its own schema takes LangChain's typed dicts only)
    return chain.with_types(input_type=CondenseInput)


def standalone_from_history(question: str, history: Sequence[BaseMessage], window: int) -> str:
    """The question made standalone with as many of the last ``window`` human questions
    of ``history`` as it leans on (``adaptive_gates.history_window``): the AI's replies
    and system messages are never judged."""
    return standalone_question(question, [m.text for m in history if m.type == "human"], window)
