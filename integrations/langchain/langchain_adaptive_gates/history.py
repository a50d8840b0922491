"""What a gate judges in a chat: the question plus a window of the conversation, or
the follow-up rewritten as a standalone question.

"And when did he die?" alone gives a gate nothing to go on; after "Who wrote Hamlet?"
it is a question about Shakespeare, and the gate should judge that one.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable

from adaptive_gates.extend import windowed_question as core_windowed_question

#: LangChain's classic condense-question instruction.
CONDENSE_INSTRUCTION = (
    "Given the chat history and the follow-up question below, rephrase the follow-up "
    "question to be a standalone question that can be understood without the chat "
    "history. Do NOT answer it; reply with the standalone question only."
)


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
    return (prompt | llm | StrOutputParser()).with_config(run_name="condense_question")


def windowed_question(question: str, history: Sequence[BaseMessage], window: int) -> str:
    """The last ``window`` messages of ``history`` (human and AI turns shown) followed by
    the question, one turn a line (``adaptive_gates.history_window``)."""
    return core_windowed_question(question, [m.text if m.type in ("human", "ai") else None for m in history], window)
