"""A chat engine that gates on the conversation's standalone question.

"And when did he die?" alone gives a gate nothing to go on; after "Who wrote Hamlet?"
it is a question about Shakespeare, and the gate should judge that one. So the engine
condenses each follow-up into a standalone question first (LlamaIndex's
condense-question chat engine: its prompt and its condensing step), then asks an
``AdaptiveQueryEngine`` with it, whose gate decides whether to retrieve.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.generic_utils import messages_to_history_str
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.callbacks import CallbackManager, trace_method
from llama_index.core.chat_engine import CondenseQuestionChatEngine
from llama_index.core.chat_engine.condense_question import DEFAULT_PROMPT
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse
from llama_index.core.llms.llm import LLM
from llama_index.core.memory import BaseMemory, ChatMemoryBuffer
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.settings import Settings

from adaptive_gates.feedback import Feedback

from .base import AdaptiveQueryEngine

logger = logging.getLogger(__name__)

#: Key of a chat response's ``metadata``: the question the engine was asked (and its
#: gate judged).
QUESTION_KEY = "standalone_question"
#: Key of a chat response's ``metadata``, present when condensing failed: why (the
#: follow-up itself was asked instead).
CONDENSE_ERROR_KEY = "condense_error"


@dataclass(frozen=True)
class _Standalone:
    """The question asked for one chat turn, and why condensing failed if it did."""

    question: str
    condense_error: str | None = None


class AdaptiveChatEngine(CondenseQuestionChatEngine):
    """A condense-question chat engine over an ``AdaptiveQueryEngine``.

    Each message is condensed with the chat history into a standalone question
    (``CondenseQuestionChatEngine``'s prompt and LLM call; the first message is asked
    as it is), and the adaptive query engine answers it, its gate judging the
    standalone question. With ``history_window`` set the engine skips the LLM call
    and asks the last ``history_window`` messages ("role: text" lines) followed by the
    message instead. A condensing LLM that fails or says nothing does not end the
    turn: the message itself is asked, and the failure is in the response's metadata.

    Each response's ``metadata`` holds the decision (``"gate_decision"``), the route
    (``"gate_route"``) and the question asked (``"standalone_question"``); its
    ``sources`` hold the query engine's response (``raw_output``), and its
    ``source_nodes`` the retrieved nodes when it retrieved. The query engine answers
    whole, so ``stream_chat`` / ``astream_chat`` stream the answer as one chunk (their
    ``sources`` carry the decision).

    Build it with ``from_defaults``.
    """

    _query_engine: AdaptiveQueryEngine  # the constructor takes no other query engine

    def __init__(
        self,
        query_engine: AdaptiveQueryEngine,
        condense_question_prompt: BasePromptTemplate,
        memory: BaseMemory,
        llm: LLM,
        history_window: int | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if not isinstance(query_engine, AdaptiveQueryEngine):
            raise TypeError(f"query_engine must be an AdaptiveQueryEngine, got {type(query_engine).__name__}")
        if query_engine.streaming:
            raise ValueError("the query engine must not stream: the chat engine streams the whole answer itself")
        if history_window is not None and history_window < 0:
            raise ValueError(f"history_window must be >= 0 or None, got {history_window}")
        super().__init__(query_engine, condense_question_prompt, memory, llm, callback_manager=callback_manager)
        self._history_window = history_window

    @classmethod
    def from_defaults(  # type: ignore[override]  # an AdaptiveQueryEngine only, not any query engine
        cls,
        query_engine: AdaptiveQueryEngine,
        condense_question_prompt: BasePromptTemplate | None = None,
        chat_history: list[ChatMessage] | None = None,
        memory: BaseMemory | None = None,
        llm: LLM | None = None,
        history_window: int | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> AdaptiveChatEngine:
        """A chat engine over ``query_engine``.

        Args:
            query_engine: answers each standalone question.
            condense_question_prompt: the condensing prompt (``{chat_history}`` and
                ``{question}``; LlamaIndex's condense-question prompt by default).
            chat_history: the conversation so far.
            memory: the chat memory (a ``ChatMemoryBuffer`` over ``chat_history``
                fitted to the LLM's context by default).
            llm: condenses the questions (default: the query engine's LLM).
            history_window: ask the last ``history_window`` messages and the message
                instead of condensing (``None``: condense).
            callback_manager: LlamaIndex's legacy callbacks (default: ``Settings``').
        """
        llm = llm or query_engine.llm
        memory = memory or ChatMemoryBuffer.from_defaults(chat_history=chat_history or [], llm=llm)
        return cls(
            query_engine,
            condense_question_prompt or DEFAULT_PROMPT,
            memory,
            llm,
            history_window=history_window,
            callback_manager=callback_manager or Settings.callback_manager,
        )

    @property
    def query_engine(self) -> AdaptiveQueryEngine:
        """The engine answering the standalone questions."""
        return self._query_engine

    def record_feedback(self, response: Any, correct: bool) -> Feedback:
        """Teach the gate whether the answer of ``response`` (one of this engine's) was
        correct: the decision it carries (on the standalone question) and the verdict go to
        ``Gate.record_decision_feedback``, so a gate that learns online (the SKR gates,
        a stacked gate's log, a budget's or cascade's members) decides later turns
        from it. ``ValueError`` when the response carries no decision;
        ``FeedbackNotSupportedError`` when the gate does not learn from feedback."""
        return self.query_engine.record_feedback(response, correct)

    # ----------------------------------------------------------------- standalone question
    def _windowed(self, history: list[ChatMessage], message: str) -> _Standalone:
        window = history[-self._history_window :] if self._history_window else []
        return _Standalone("\n".join(filter(None, [messages_to_history_str(window), message])))

    def _condensed(self, message: str, output: str | Exception) -> _Standalone:
        """The condensing step's result, or the message itself when it gave none."""
        if isinstance(output, str) and output.strip():
            return _Standalone(output.strip())
        reason = f"{type(output).__name__}: {output}" if isinstance(output, Exception) else f"no text ({output!r})"
        logger.warning("condensing the follow-up failed (%s); asking the message itself", reason)
        return _Standalone(message, reason)

    def _standalone(self, history: list[ChatMessage], message: str) -> _Standalone:
        if self._history_window is not None:
            return self._windowed(history, message)
        try:
            output: str | Exception = self._condense_question(history, message)
        except Exception as exc:  # a failing condenser must not end the turn
            output = exc
        return self._condensed(message, output)

    async def _astandalone(self, history: list[ChatMessage], message: str) -> _Standalone:
        if self._history_window is not None:
            return self._windowed(history, message)
        try:
            output: str | Exception = await self._acondense_question(history, message)
        except Exception as exc:  # a failing condenser must not end the turn
            output = exc
        return self._condensed(message, output)

    # ----------------------------------------------------------------- chat
    def _turn(self, asked: _Standalone, response: RESPONSE_TYPE) -> AgentChatResponse:
        metadata = {**(response.metadata or {}), QUESTION_KEY: asked.question}
        if asked.condense_error is not None:
            metadata[CONDENSE_ERROR_KEY] = asked.condense_error
        return AgentChatResponse(
            response=str(response),
            sources=[self._get_tool_output_from_response(asked.question, response)],
            metadata=metadata,
        )

    @staticmethod
    def _exchange(message: str, answer: AgentChatResponse) -> tuple[ChatMessage, ChatMessage]:
        return (
            ChatMessage(role=MessageRole.USER, content=message),
            ChatMessage(role=MessageRole.ASSISTANT, content=answer.response),
        )

    @trace_method("chat")
    def chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        history = chat_history or self._memory.get(input=message)
        asked = self._standalone(history, message)
        answer = self._turn(asked, self._query_engine.query(asked.question))
        for turn in self._exchange(message, answer):
            self._memory.put(turn)
        return answer

    @trace_method("chat")
    async def achat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        history = chat_history or await self._memory.aget(input=message)
        asked = await self._astandalone(history, message)
        answer = self._turn(asked, await self._query_engine.aquery(asked.question))
        for turn in self._exchange(message, answer):
            await self._memory.aput(turn)
        return answer

    @trace_method("chat")
    def stream_chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> StreamingAgentChatResponse:
        answer = self.chat(message, chat_history)
        return StreamingAgentChatResponse(
            response=answer.response,
            sources=answer.sources,
            chat_stream=_one(answer.response),
            is_writing_to_memory=False,  # chat() has written the turn already
        )

    @trace_method("chat")
    async def astream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        answer = await self.achat(message, chat_history)
        return StreamingAgentChatResponse(
            response=answer.response,
            sources=answer.sources,
            achat_stream=_aone(answer.response),
            is_writing_to_memory=False,  # achat() has written the turn already
        )


def _chunk(text: str) -> ChatResponse:
    return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=text)


def _one(text: str) -> Generator[ChatResponse, None, None]:
    yield _chunk(text)


async def _aone(text: str) -> AsyncGenerator[ChatResponse, None]:
    yield _chunk(text)
