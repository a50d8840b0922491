"""A query engine that retrieves only when its gate says the LLM needs it."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.indices.base import BaseIndex
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms.llm import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.response_synthesizers import BaseSynthesizer, get_response_synthesizer
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.selectors.adaptive_gates.gating import adecide, decide, response_feedback, route_of
from llama_index.selectors.adaptive_gates.passages import decision_nodes
from llama_index.selectors.adaptive_gates.reason import DECISION_METADATA_KEY
from llama_index.selectors.adaptive_gates.shadowing import learn_from_answer, synthesized_text

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import DEFAULT_REFIT_EVERY, DRAFT, QA, RETRIEVE, Feedback, ShadowLearner, door_learner

from .streaming import aone_piece, one_piece

#: Key of a response's ``metadata`` holding the decision (``GateDecision.to_dict()``).
METADATA_KEY = DECISION_METADATA_KEY
#: Key of a response's ``metadata`` naming how it was answered: one of ``ROUTES``
#: (``llama_index.selectors.adaptive_gates.ROUTES``).
ROUTE_KEY = "gate_route"

dispatcher = get_dispatcher(__name__)

#: The direct-answer prompt: the plain QA prompt of When-to-Retrieve (SPEC §3), the
#: one a verbalized gate's draft answers, so direct and draft answers read alike.
DEFAULT_DIRECT_PROMPT = PromptTemplate(QA, template_var_mappings={"query_str": "question"})


class AdaptiveQueryEngine(BaseQueryEngine):
    """Answers each query from the LLM's own knowledge or from retrieved nodes, as a
    gate decides.

    Per query the gate judges ``query_str``:

    - retrieve: the retriever's nodes, through the ``node_postprocessors``, are
      synthesised by the response synthesizer (as ``RetrieverQueryEngine`` does);
      the response's ``source_nodes`` are those nodes. A gate that retrieved to
      decide (a draft-check gate) gives its passages instead (``decision_nodes``),
      and the retriever is not called.
    - answer directly: the LLM answers ``direct_prompt`` alone; when the gate already
      produced an answer (a confident ``VerbalizedGate``) and ``reuse_draft`` is on,
      that draft is the response and no further LLM call is made.

    Every response's ``metadata`` holds the decision under ``"gate_decision"``
    (``GateDecision.to_dict()``) and the route taken under ``"gate_route"``
    (``"retrieve"``, ``"direct"`` or ``"draft"``). The decision is fired as a
    ``GateDecisionEvent`` inside this engine's ``_query`` / ``_aquery`` span, after a
    ``GateLLMCallEvent`` for each request the gate sent its LLM. A gate whose LLM fails
    gives its fallback decision (``error`` set) and the engine follows it; a gate that
    raises is treated the same way (its ``fallback_retrieve``, retrieve by default),
    with the exception recorded as the decision's ``error``. A gate that cannot decide
    at all is raised: ``NotFittedError`` (not fitted or loaded) and
    ``BackendMisconfiguredError`` (a backend that cannot serve it); this is the core's
    door policy (``adaptive_gates.extend.decide_or_fallback``). The async path awaits the
    gate, retriever, synthesizer and LLM natively or in worker threads: the event loop
    is never blocked.

    Args:
        gate: any gate of the core.
        retriever: the retriever asked when the gate says retrieve.
        llm: the LLM answering (default ``Settings.llm``).
        response_synthesizer: synthesises retrieved nodes (default:
            ``get_response_synthesizer(llm=llm, streaming=streaming)``).
        node_postprocessors: applied to retrieved nodes before synthesis.
        direct_prompt: the direct-answer prompt (``{query_str}`` is the slot);
            also ``update_prompts({"direct_prompt": ...})``.
        reuse_draft: answer with the gate's draft answer when it has one.
        streaming: return ``StreamingResponse`` (``AsyncStreamingResponse`` from
            ``aquery``) whose text streams token by token as the LLM generates it (a
            draft answer as one piece; ``metadata`` is set before the first token); a
            given ``response_synthesizer`` must stream alike.
        callback_manager: LlamaIndex's legacy callbacks.
        shadow_rate: shadow learning (a draft-check gate learning its LLM from the
            queries this engine answers, ``docs/shadow_learning.md``): the pair of each
            decision answered over the passages it checked (its draft, the response's
            text) is recorded with the gate, observed with probability 1, and a share
            ``shadow_rate`` R of the decisions answered without them are also answered
            over those passages (the response synthesizer, after the node
            postprocessors: one extra LLM call, never returned), observed with
            probability R. It all runs after the response is made, in a worker thread
            (from ``aquery`` too); a failure is logged, never raised. ``None``: nothing
            is recorded. A streaming response's text is the caller's to read, so its
            pair is not recorded (its shadows are).
        shadow_refit_every: pairs between the gate's refits.
        shadow_learner: the ``ShadowLearner`` to use instead of ``shadow_rate``'s (its
            counters, ``drain()``).
    """

    def __init__(
        self,
        gate: Gate,
        retriever: BaseRetriever,
        llm: LLM | None = None,
        response_synthesizer: BaseSynthesizer | None = None,
        node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
        direct_prompt: BasePromptTemplate | None = None,
        reuse_draft: bool = True,
        streaming: bool = False,
        callback_manager: CallbackManager | None = None,
        shadow_rate: float | None = None,
        shadow_refit_every: int = DEFAULT_REFIT_EVERY,
        shadow_learner: ShadowLearner | None = None,
    ) -> None:
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a LlamaIndex BaseRetriever, got {type(retriever).__name__}")
        self._gate = gate
        self._retriever = retriever
        self._llm = llm or Settings.llm
        self._streaming = streaming
        self._response_synthesizer = response_synthesizer or get_response_synthesizer(
            llm=self._llm, streaming=streaming, callback_manager=callback_manager or Settings.callback_manager
        )
        self._node_postprocessors = list(node_postprocessors or [])
        self._direct_prompt = direct_prompt or DEFAULT_DIRECT_PROMPT
        self._reuse_draft = reuse_draft
        self._shadow = door_learner(gate, shadow_rate, shadow_refit_every, shadow_learner)
        callback_manager = callback_manager or self._response_synthesizer.callback_manager
        for postprocessor in self._node_postprocessors:
            postprocessor.callback_manager = callback_manager
        super().__init__(callback_manager=callback_manager)

    @classmethod
    def from_index(
        cls,
        index: BaseIndex,
        gate: Gate,
        *,
        llm: LLM | None = None,
        similarity_top_k: int | None = None,
        **kwargs: Any,
    ) -> AdaptiveQueryEngine:
        """An engine over ``index.as_retriever()`` (``similarity_top_k`` nodes when
        given); ``kwargs`` go to the constructor."""
        retriever_kwargs = {} if similarity_top_k is None else {"similarity_top_k": similarity_top_k}
        return cls(gate, index.as_retriever(**retriever_kwargs), llm=llm, **kwargs)

    @property
    def gate(self) -> Gate:
        """The gate deciding each query."""
        return self._gate

    def record_feedback(self, response: Any, correct: bool) -> Feedback:
        """Teach the gate whether this engine's ``response`` was correct: the decision
        it carries and the verdict go to the gate (see ``response_feedback``)."""
        return response_feedback(self._gate, response, correct)

    @property
    def shadow_learner(self) -> ShadowLearner | None:
        """What records the gate's pairs and asks its shadows (``None``: nothing is)."""
        return self._shadow

    @property
    def retriever(self) -> BaseRetriever:
        """The retriever asked when the gate says retrieve."""
        return self._retriever

    @property
    def llm(self) -> LLM:
        """The LLM answering."""
        return self._llm

    @property
    def streaming(self) -> bool:
        """True when responses stream."""
        return self._streaming

    # ----------------------------------------------------------------- prompts
    def _get_prompts(self) -> PromptDictType:
        return {"direct_prompt": self._direct_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "direct_prompt" in prompts:
            self._direct_prompt = prompts["direct_prompt"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"response_synthesizer": self._response_synthesizer}

    # ----------------------------------------------------------------- retrieval
    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The retriever's nodes for the query, post-processed."""
        nodes = self._retriever.retrieve(query_bundle)
        for postprocessor in self._node_postprocessors:
            nodes = postprocessor.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    async def aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """``retrieve`` awaited."""
        nodes = await self._retriever.aretrieve(query_bundle)
        for postprocessor in self._node_postprocessors:
            nodes = await postprocessor.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    def _answer_nodes(self, query_bundle: QueryBundle, decision: GateDecision) -> list[NodeWithScore]:
        """The nodes a retrieving ``decision`` is answered over: the passages its gate
        checked (post-processed), else ``retrieve``'s."""
        nodes = decision_nodes(decision)
        if nodes is None:
            return self.retrieve(query_bundle)
        for postprocessor in self._node_postprocessors:
            nodes = postprocessor.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    async def _aanswer_nodes(self, query_bundle: QueryBundle, decision: GateDecision) -> list[NodeWithScore]:
        """``_answer_nodes`` awaited."""
        nodes = decision_nodes(decision)
        if nodes is None:
            return await self.aretrieve(query_bundle)
        for postprocessor in self._node_postprocessors:
            nodes = await postprocessor.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    # ----------------------------------------------------------------- answering
    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        question = query_bundle.query_str
        with self.callback_manager.event(CBEventType.QUERY, payload={EventPayload.QUERY_STR: question}) as event:
            decision, payload = decide(self._gate, question, dispatcher)
            route = route_of(decision, self._reuse_draft)
            if route == RETRIEVE:
                nodes = self._answer_nodes(query_bundle, decision)
                response = self._response_synthesizer.synthesize(query=query_bundle, nodes=nodes)
            elif route == DRAFT:
                response = self._draft(decision.draft_answer or "", sync=True)
            elif self._streaming:
                response = StreamingResponse(self._llm.stream(self._direct_prompt, query_str=question))
            else:
                response = Response(self._llm.predict(self._direct_prompt, query_str=question))
            response.metadata = {**(response.metadata or {}), METADATA_KEY: payload, ROUTE_KEY: route}
            event.on_end(payload={EventPayload.RESPONSE: response})
        self._observe(query_bundle, decision, response)
        return response

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        question = query_bundle.query_str
        with self.callback_manager.event(CBEventType.QUERY, payload={EventPayload.QUERY_STR: question}) as event:
            decision, payload = await adecide(self._gate, question, dispatcher)
            route = route_of(decision, self._reuse_draft)
            if route == RETRIEVE:
                nodes = await self._aanswer_nodes(query_bundle, decision)
                response = await self._response_synthesizer.asynthesize(query=query_bundle, nodes=nodes)
            elif route == DRAFT:
                response = self._draft(decision.draft_answer or "", sync=False)
            elif self._streaming:
                response = AsyncStreamingResponse(await self._llm.astream(self._direct_prompt, query_str=question))
            else:
                response = Response(await self._llm.apredict(self._direct_prompt, query_str=question))
            response.metadata = {**(response.metadata or {}), METADATA_KEY: payload, ROUTE_KEY: route}
            event.on_end(payload={EventPayload.RESPONSE: response})
        self._observe(query_bundle, decision, response)
        return response

    def _draft(self, answer: str, sync: bool) -> RESPONSE_TYPE:
        """The gate's draft answer as the response (one chunk when streaming)."""
        if not self._streaming:
            return Response(answer)
        return StreamingResponse(one_piece(answer)) if sync else AsyncStreamingResponse(aone_piece(answer))

    # ----------------------------------------------------------------- shadow learning
    def _observe(self, query_bundle: QueryBundle, decision: GateDecision, response: RESPONSE_TYPE) -> None:
        """Hand ``decision`` and its response to the shadow learner (``learn_from_answer``):
        answered over the passages the gate checked when the response's nodes are theirs."""
        text = response.response if isinstance(response, Response) else None
        answer_over = functools.partial(self._synthesized, query_bundle)
        learn_from_answer(
            self._shadow, decision, response.source_nodes, text, answer_over, query_bundle, self._node_postprocessors
        )

    def _synthesized(self, query_bundle: QueryBundle, nodes: list[NodeWithScore]) -> str:
        """The response synthesizer's answer over ``nodes`` (a shadow's)."""
        return synthesized_text(self._response_synthesizer.synthesize(query=query_bundle, nodes=nodes))
