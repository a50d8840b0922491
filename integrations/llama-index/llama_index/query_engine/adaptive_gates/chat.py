"""A chat engine that gates on the conversation's standalone question.

"And when did he die?" alone gives a gate nothing to go on; after "Who wrote Hamlet?"
it is a question about Shakespeare, and the gate should judge that one. So the engine
condenses each follow-up into a standalone question first (LlamaIndex's
condense-question chat engine: its prompt and its condensing step), then asks an
``AdaptiveQueryEngine`` with it, whose gate decides whether to retrieve.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.base.response.schema import RESPONSE_TYPE, AsyncStreamingResponse
from llama_index.core.callbacks import CallbackManager, trace_method
from llama_index.core.chat_engine import CondenseQuestionChatEngine
from llama_index.core.chat_engine.condense_question import DEFAULT_PROMPT
from llama_index.core.chat_engine.types import AgentChatResponse
from llama_index.core.llms.llm import LLM
from llama_index.core.memory import BaseMemory, ChatMemoryBuffer
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.settings import Settings

from adaptive_gates.extend import Feedback, standalone_question

from .base import AdaptiveQueryEngine
from .standalone import Standalone, chat_message, condense_inputs, condensed, exchange, turn_metadata
from .streaming import GatedStreamingChatResponse, astream_into, atokens_of, stream_into, tokens_of


class AdaptiveChatEngine(CondenseQuestionChatEngine):
    """A condense-question chat engine over an ``AdaptiveQueryEngine``.

    Each message is condensed with the chat history into a standalone question
    (``CondenseQuestionChatEngine``'s prompt and LLM call; the first message is asked
    as it is), and the adaptive query engine answers it, its gate judging the
    standalone question. With ``history_window`` set the engine skips the LLM call
    and asks the message made standalone by the core's rule instead: after as many of
    the last ``history_window`` user messages as it leans on
    (``adaptive_gates.answering.history_window``). A condensing LLM that fails or says nothing does not end the
    turn: the message itself is asked, and the failure is in the response's metadata.

    Each response's ``metadata`` holds the decision (``"gate_decision"``), the route
    (``"gate_route"``) and the question asked (``"standalone_question"``); its
    ``sources`` hold the query engine's response (``raw_output``), and its
    ``source_nodes`` the retrieved nodes when it retrieved.

    ``stream_chat`` / ``astream_chat`` return a ``GatedStreamingChatResponse`` whose
    ``metadata`` (the same keys) is there before the first token. Over a query engine
    built with ``streaming=True`` the answer streams token by token as the LLM
    generates it (a gate's draft answer as one piece); over one that answers whole it
    comes as one piece. ``chat`` / ``achat`` take either engine.

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
            history_window: ask the message after as many of the last
                ``history_window`` user messages as it leans on, instead of condensing
                (``None``: condense).
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
    def _condense_question(self, chat_history: list[ChatMessage], last_message: str) -> str:
        """``CondenseQuestionChatEngine``'s condensing call, its prompt filled by ``condense_inputs``."""
        if not chat_history:
            return last_message
        return self._llm.predict(self._condense_question_prompt, **condense_inputs(chat_history, last_message))

    async def _acondense_question(self, chat_history: list[ChatMessage], last_message: str) -> str:
        """``_condense_question``, awaited."""
        if not chat_history:
            return last_message
        return await self._llm.apredict(self._condense_question_prompt, **condense_inputs(chat_history, last_message))

    def _windowed(self, history: list[ChatMessage], message: str) -> Standalone:
        asked_before = [m.content or "" for m in history if m.role == MessageRole.USER]
        return Standalone(standalone_question(message, asked_before, self._history_window or 0))

    def _standalone(self, history: list[ChatMessage], message: str) -> Standalone:
        if self._history_window is not None:
            return self._windowed(history, message)
        try:
            output: str | Exception = self._condense_question(history, message)
        except Exception as exc:  # a failing condenser must not end the turn
            output = exc
        return condensed(message, output, history)

    async def _astandalone(self, history: list[ChatMessage], message: str) -> Standalone:
        if self._history_window is not None:
            return self._windowed(history, message)
        try:
            output: str | Exception = await self._acondense_question(history, message)
        except Exception as exc:  # a failing condenser must not end the turn
            output = exc
        return condensed(message, output, history)

    # ----------------------------------------------------------------- chat
    def _turn(self, asked: Standalone, response: RESPONSE_TYPE, text: str) -> AgentChatResponse:
        return AgentChatResponse(
            response=text,
            sources=[self._get_tool_output_from_response(asked.question, response)],
            metadata=turn_metadata(asked, response.metadata),
        )

    @trace_method("chat")
    def chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        message = chat_message(message)
        history = chat_history or self._memory.get(input=message)
        asked = self._standalone(history, message)
        response = self._query_engine.query(asked.question)
        answer = self._turn(asked, response, str(response))  # a streaming response is read whole
        for turn in exchange(message, answer.response):
            self._memory.put(turn)
        return answer

    @trace_method("chat")
    async def achat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        message = chat_message(message)
        history = chat_history or await self._memory.aget(input=message)
        asked = await self._astandalone(history, message)
        response = await self._query_engine.aquery(asked.question)
        whole = await response.get_response() if isinstance(response, AsyncStreamingResponse) else response
        answer = self._turn(asked, response, str(whole))
        for turn in exchange(message, answer.response):
            await self._memory.aput(turn)
        return answer

    @trace_method("chat")
    def stream_chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> GatedStreamingChatResponse:
        message = chat_message(message)
        history = chat_history or self._memory.get(input=message)
        asked = self._standalone(history, message)
        response = self._query_engine.query(asked.question)
        return stream_into(
            self._memory,
            message,
            tokens_of(response),
            sources=[self._get_tool_output_from_response(asked.question, response)],
            source_nodes=list(response.source_nodes),
            metadata=turn_metadata(asked, response.metadata),
        )

    @trace_method("chat")
    async def astream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> GatedStreamingChatResponse:
        message = chat_message(message)
        history = chat_history or await self._memory.aget(input=message)
        asked = await self._astandalone(history, message)
        response = await self._query_engine.aquery(asked.question)
        return await astream_into(
            self._memory,
            message,
            atokens_of(response),
            sources=[self._get_tool_output_from_response(asked.question, response)],
            source_nodes=list(response.source_nodes),
            metadata=turn_metadata(asked, response.metadata),
        )
