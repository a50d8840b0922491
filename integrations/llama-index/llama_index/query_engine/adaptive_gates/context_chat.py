"""A condense-plus-context chat engine that retrieves context only when its gate says so.

LlamaIndex's ``CondensePlusContextChatEngine`` condenses each follow-up into a
standalone question, retrieves context for it and answers the message with the chat
history and that context in the system prompt. Here a gate judges the standalone
question first: retrieval (and the context prompt) happens only when it says the LLM
needs it; otherwise the LLM answers from the chat history alone, or the gate's own
draft answer is the reply.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass, replace
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.callbacks import CallbackManager, trace_method
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.chat_engine.types import AgentChatResponse, ToolOutput
from llama_index.core.indices.base import BaseIndex
from llama_index.core.indices.base_retriever import BaseRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms.llm import LLM
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.selectors.adaptive_gates.gating import adecide, decide, response_feedback, route_of
from llama_index.selectors.adaptive_gates.passages import decision_nodes
from llama_index.selectors.adaptive_gates.shadowing import learn_from_answer, synthesized_text

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import DEFAULT_REFIT_EVERY, DRAFT, RETRIEVE, Feedback, ShadowLearner, door_learner

from .base import METADATA_KEY, ROUTE_KEY
from .standalone import Standalone, chat_message, condense_inputs, condensed, exchange, turn_metadata
from .streaming import (
    GatedStreamingChatResponse,
    astream_into,
    atokens_of,
    stream_into,
    tokens_of,
)

dispatcher = get_dispatcher(__name__)

#: Room left for the answer when the default memory is fitted to the LLM's context
#: (as ``CondensePlusContextChatEngine.from_defaults`` leaves it).
_ANSWER_ROOM = 256


@dataclass(frozen=True)
class _Plan:
    """One turn before answering: the question the gate judged, its decision, the
    route and the retrieved nodes (none unless it retrieved)."""

    asked: Standalone
    decision: GateDecision
    route: str
    nodes: list[NodeWithScore]
    history: list[ChatMessage]
    metadata: dict[str, Any]


class AdaptiveContextChatEngine(CondensePlusContextChatEngine):
    """``CondensePlusContextChatEngine`` with a gate: context is retrieved only when the
    gate says the LLM needs it.

    Per message: the follow-up and the chat history are condensed into a standalone
    question (the first message is asked as it is; a condensing LLM that fails or
    says nothing leaves the message itself, the failure kept in the metadata), the
    gate judges it, and then

    - retrieve: the retriever's nodes for the standalone question, through the
      ``node_postprocessors``, go into the context system prompt and the LLM answers
      the message with the chat history, exactly as ``CondensePlusContextChatEngine``
      (a gate that retrieved to decide, a draft-check gate, gives its passages
      instead: ``decision_nodes``, and the retriever is not called);
    - answer directly: the LLM answers the message with the chat history and the
      ``system_prompt`` (if any), with no context and no retrieval;
    - draft: a gate that already answered the standalone question (a confident
      ``VerbalizedGate``) gives that answer, with no further LLM call (``reuse_draft``).

    Each response's ``metadata`` holds the decision (``"gate_decision"``,
    ``GateDecision.to_dict()``), the route (``"gate_route"``) and the question judged
    (``"standalone_question"``); ``source_nodes`` are the retrieved nodes. The decision
    is fired as a ``GateDecisionEvent`` inside the chat call's span. ``stream_chat`` /
    ``astream_chat`` stream the answer token by token (a draft as one piece) and return
    a ``GatedStreamingChatResponse`` whose ``metadata`` is there before the first token.

    Shadow learning (``shadow_rate``, ``shadow_refit_every``, ``shadow_learner``; see
    ``AdaptiveQueryEngine`` and ``docs/shadow_learning.md``): the pair of each decision
    answered over the passages the gate checked (its draft, the reply) is recorded with
    the gate, and a share ``shadow_rate`` of the decisions answered without them are
    also answered over those passages, after the node postprocessors, by this engine's
    context path (the context prompt with the turn's chat history, the message, the
    LLM: one extra LLM call, never returned or written to memory). It runs after the
    reply is made, in a worker thread; a failure is logged, never raised. A streamed
    reply's pair is not recorded (its text is the caller's to read); its shadows are.

    Build it with ``from_defaults`` or ``from_index``.
    """

    def __init__(
        self,
        gate: Gate,
        retriever: BaseRetriever,
        llm: LLM,
        memory: BaseMemory,
        *,
        reuse_draft: bool = True,
        shadow_rate: float | None = None,
        shadow_refit_every: int = DEFAULT_REFIT_EVERY,
        shadow_learner: ShadowLearner | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a LlamaIndex BaseRetriever, got {type(retriever).__name__}")
        super().__init__(retriever, llm, memory, **kwargs)
        self._gate = gate
        self._reuse_draft = reuse_draft
        self._shadow = door_learner(gate, shadow_rate, shadow_refit_every, shadow_learner)

    @classmethod
    def from_defaults(  # type: ignore[override]  # a gate comes first, and no verbose/kwargs
        cls,
        gate: Gate,
        retriever: BaseRetriever,
        llm: LLM | None = None,
        chat_history: list[ChatMessage] | None = None,
        memory: BaseMemory | None = None,
        system_prompt: str | None = None,
        context_prompt: str | PromptTemplate | None = None,
        context_refine_prompt: str | PromptTemplate | None = None,
        condense_prompt: str | PromptTemplate | None = None,
        skip_condense: bool = False,
        node_postprocessors: list[BaseNodePostprocessor] | None = None,
        reuse_draft: bool = True,
        callback_manager: CallbackManager | None = None,
        shadow_rate: float | None = None,
        shadow_refit_every: int = DEFAULT_REFIT_EVERY,
        shadow_learner: ShadowLearner | None = None,
    ) -> AdaptiveContextChatEngine:
        """A chat engine gating ``retriever`` with ``gate``.

        Args:
            gate: judges each standalone question.
            retriever: gives the context when the gate says retrieve.
            llm: condenses and answers (default ``Settings.llm``).
            chat_history: the conversation so far.
            memory: the chat memory (default: a ``Memory`` over ``chat_history``
                fitted to the LLM's context).
            system_prompt: added to the context prompt, and the system prompt of
                direct answers.
            context_prompt, context_refine_prompt, condense_prompt: the prompts of
                ``CondensePlusContextChatEngine`` (its own by default).
            skip_condense: judge and retrieve for the message itself.
            node_postprocessors: applied to retrieved nodes.
            reuse_draft: answer with the gate's draft answer when it has one.
            callback_manager: LlamaIndex's legacy callbacks (default: ``Settings``').
            shadow_rate, shadow_refit_every, shadow_learner: shadow learning (see
                the class); ``None``: nothing is recorded.
        """
        llm = llm or Settings.llm
        memory = memory or Memory.from_defaults(
            chat_history=chat_history or [], token_limit=llm.metadata.context_window - _ANSWER_ROOM
        )
        return cls(
            gate,
            retriever,
            llm,
            memory,
            reuse_draft=reuse_draft,
            system_prompt=system_prompt,
            context_prompt=context_prompt,
            context_refine_prompt=context_refine_prompt,
            condense_prompt=condense_prompt,
            skip_condense=skip_condense,
            node_postprocessors=node_postprocessors,
            callback_manager=callback_manager or Settings.callback_manager,
            shadow_rate=shadow_rate,
            shadow_refit_every=shadow_refit_every,
            shadow_learner=shadow_learner,
        )

    @classmethod
    def from_index(
        cls, index: BaseIndex, gate: Gate, *, similarity_top_k: int | None = None, **kwargs: Any
    ) -> AdaptiveContextChatEngine:
        """An engine over ``index.as_retriever()`` (``similarity_top_k`` nodes when
        given); ``kwargs`` go to ``from_defaults``."""
        retriever_kwargs = {} if similarity_top_k is None else {"similarity_top_k": similarity_top_k}
        return cls.from_defaults(gate, index.as_retriever(**retriever_kwargs), **kwargs)

    @property
    def gate(self) -> Gate:
        """The gate judging each standalone question."""
        return self._gate

    def record_feedback(self, response: Any, correct: bool) -> Feedback:
        """Teach the gate whether the answer of ``response`` (one of this engine's) was
        correct (see ``AdaptiveQueryEngine.record_feedback``)."""
        return response_feedback(self._gate, response, correct)

    @property
    def shadow_learner(self) -> ShadowLearner | None:
        """What records the gate's pairs and asks its shadows (``None``: nothing is)."""
        return self._shadow

    # ----------------------------------------------------------------- planning a turn
    def _condense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        """``CondensePlusContextChatEngine``'s condensing call, its prompt filled by ``condense_inputs``."""
        if self._skip_condense or not chat_history:
            return latest_message
        prompt = self._condense_prompt_template.format(**condense_inputs(chat_history, latest_message))
        return str(self._llm.complete(prompt))

    async def _acondense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        """``_condense_question``, awaited."""
        if self._skip_condense or not chat_history:
            return latest_message
        prompt = self._condense_prompt_template.format(**condense_inputs(chat_history, latest_message))
        return str(await self._llm.acomplete(prompt))

    def _condensed(self, history: list[ChatMessage], message: str) -> Standalone:
        try:
            output: str | Exception = self._condense_question(history, message)
        except Exception as exc:  # a failing condenser must not end the turn
            output = exc
        return condensed(message, output, history)

    async def _acondensed(self, history: list[ChatMessage], message: str) -> Standalone:
        try:
            output: str | Exception = await self._acondense_question(history, message)
        except Exception as exc:  # a failing condenser must not end the turn
            output = exc
        return condensed(message, output, history)

    def _planned(
        self, asked: Standalone, decision: GateDecision, payload: dict[str, Any], history: list[ChatMessage]
    ) -> _Plan:
        route = route_of(decision, self._reuse_draft)
        metadata = turn_metadata(asked, {METADATA_KEY: payload, ROUTE_KEY: route})
        return _Plan(asked, decision, route, [], history, metadata)

    def _plan(self, message: str, chat_history: list[ChatMessage] | None) -> _Plan:
        chat_message(message)  # before the memory is set or read
        if chat_history is not None:
            self._memory.set(chat_history)
        history = self._memory.get(input=message)
        asked = self._condensed(history, message)
        plan = self._planned(asked, *decide(self._gate, asked.question, dispatcher), history)
        if plan.route != RETRIEVE:
            return plan
        checked = decision_nodes(plan.decision)
        if checked is None:
            return replace(plan, nodes=self._get_nodes(asked.question))
        for postprocessor in self._node_postprocessors:  # as _get_nodes treats the retriever's
            checked = postprocessor.postprocess_nodes(checked, query_bundle=QueryBundle(asked.question))
        return replace(plan, nodes=checked)

    async def _aplan(self, message: str, chat_history: list[ChatMessage] | None) -> _Plan:
        chat_message(message)  # before the memory is set or read
        if chat_history is not None:
            await self._memory.aset(chat_history)
        history = await self._memory.aget(input=message)
        asked = await self._acondensed(history, message)
        plan = self._planned(asked, *(await adecide(self._gate, asked.question, dispatcher)), history)
        if plan.route != RETRIEVE:
            return plan
        checked = decision_nodes(plan.decision)
        if checked is None:
            return replace(plan, nodes=await self._aget_nodes(asked.question))
        for postprocessor in self._node_postprocessors:  # as in _plan
            checked = await postprocessor.apostprocess_nodes(checked, query_bundle=QueryBundle(asked.question))
        return replace(plan, nodes=checked)

    def _direct_messages(self, history: list[ChatMessage], message: str) -> list[ChatMessage]:
        """The conversation the LLM answers without context: system prompt, history, message."""
        system = [ChatMessage(role=self._llm.metadata.system_role, content=self._system_prompt)]
        return [*(system if self._system_prompt else []), *history, ChatMessage(role=MessageRole.USER, content=message)]

    def _fields(self, plan: _Plan) -> dict[str, Any]:
        """A response's sources, nodes and metadata (the retriever's output as
        ``CondensePlusContextChatEngine`` reports it)."""
        source = ToolOutput(
            tool_name="retriever",
            content=str(plan.nodes),
            raw_input={"message": plan.asked.question},
            raw_output=plan.nodes,
        )
        return {"sources": [source], "source_nodes": list(plan.nodes), "metadata": plan.metadata}

    # ----------------------------------------------------------------- answering
    def _answer(self, plan: _Plan, message: str) -> str:
        if plan.route == RETRIEVE:
            return str(self._get_response_synthesizer(plan.history).synthesize(message, plan.nodes))
        if plan.route == DRAFT:
            return plan.decision.draft_answer or ""
        return self._llm.chat(self._direct_messages(plan.history, message)).message.content or ""

    async def _aanswer(self, plan: _Plan, message: str) -> str:
        if plan.route == RETRIEVE:
            synthesizer = self._get_response_synthesizer(plan.history)
            return str(await synthesizer.asynthesize(message, plan.nodes))
        if plan.route == DRAFT:
            return plan.decision.draft_answer or ""
        return (await self._llm.achat(self._direct_messages(plan.history, message))).message.content or ""

    def _tokens(self, plan: _Plan, message: str) -> Generator[str, None, None]:
        if plan.route == RETRIEVE:
            synthesizer = self._get_response_synthesizer(plan.history, streaming=True)
            yield from tokens_of(synthesizer.synthesize(message, plan.nodes))
        elif plan.route == DRAFT:
            yield plan.decision.draft_answer or ""
        else:
            for chunk in self._llm.stream_chat(self._direct_messages(plan.history, message)):
                yield chunk.delta or ""

    async def _atokens(self, plan: _Plan, message: str) -> AsyncGenerator[str, None]:
        if plan.route == RETRIEVE:
            synthesizer = self._get_response_synthesizer(plan.history, streaming=True)
            async for token in atokens_of(await synthesizer.asynthesize(message, plan.nodes)):
                yield token
        elif plan.route == DRAFT:
            yield plan.decision.draft_answer or ""
        else:
            async for chunk in await self._llm.astream_chat(self._direct_messages(plan.history, message)):
                yield chunk.delta or ""

    # ----------------------------------------------------------------- shadow learning
    def _observe(self, plan: _Plan, message: str, answer: str | None) -> None:
        """Hand the turn's decision and reply (``None``: streamed) to the shadow learner."""
        answer_over = functools.partial(self._synthesized, plan.history, message)
        query_bundle = QueryBundle(plan.asked.question)
        learn_from_answer(
            self._shadow, plan.decision, plan.nodes, answer, answer_over, query_bundle, self._node_postprocessors
        )

    def _synthesized(self, history: list[ChatMessage], message: str, nodes: list[NodeWithScore]) -> str:
        """The context path's answer to ``message`` over ``nodes`` (a shadow's)."""
        return synthesized_text(self._get_response_synthesizer(history).synthesize(message, nodes))

    @trace_method("chat")
    def chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        plan = self._plan(message, chat_history)
        answer = self._answer(plan, message)
        for turn in exchange(message, answer):
            self._memory.put(turn)
        response = AgentChatResponse(response=answer, **self._fields(plan))
        self._observe(plan, message, answer)
        return response

    @trace_method("chat")
    async def achat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        plan = await self._aplan(message, chat_history)
        answer = await self._aanswer(plan, message)
        for turn in exchange(message, answer):
            await self._memory.aput(turn)
        response = AgentChatResponse(response=answer, **self._fields(plan))
        self._observe(plan, message, answer)
        return response

    @trace_method("chat")
    def stream_chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> GatedStreamingChatResponse:
        plan = self._plan(message, chat_history)
        response = stream_into(self._memory, message, self._tokens(plan, message), **self._fields(plan))
        self._observe(plan, message, None)
        return response

    @trace_method("chat")
    async def astream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> GatedStreamingChatResponse:
        plan = await self._aplan(message, chat_history)
        response = await astream_into(self._memory, message, self._atokens(plan, message), **self._fields(plan))
        self._observe(plan, message, None)
        return response
