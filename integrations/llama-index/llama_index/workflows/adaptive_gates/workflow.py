"""``AdaptiveRAGWorkflow``: gate, then retrieve and synthesise, or answer directly, or
reuse the gate's draft, as the steps of a LlamaIndex ``Workflow``."""

from __future__ import annotations

import functools
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import Response
from llama_index.core.indices.base import BaseIndex
from llama_index.core.llms.llm import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.response_synthesizers import BaseSynthesizer, get_response_synthesizer
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.core.workflow import Context, StartEvent, StopEvent, Workflow, step
from llama_index.query_engine.adaptive_gates.base import DEFAULT_DIRECT_PROMPT, METADATA_KEY, ROUTE_KEY
from llama_index.selectors.adaptive_gates.passages import decision_nodes
from llama_index.selectors.adaptive_gates.shadowing import learn_from_answer, synthesized_text

from adaptive_gates import Gate
from adaptive_gates.extend import DEFAULT_REFIT_EVERY, DIRECT, DRAFT, RETRIEVE, ShadowLearner, door_learner

from .events import AnswerDirectlyEvent, DraftAnswerEvent, GateRouteEvent, NodesRetrievedEvent, RetrieveEvent
from .routing import gate_route_event


class AdaptiveRAGWorkflow(Workflow):
    """Adaptive RAG as a workflow: the gate decides per query whether to retrieve.

    Steps: ``decide`` (StartEvent -> ``RetrieveEvent`` | ``AnswerDirectlyEvent`` |
    ``DraftAnswerEvent``); ``retrieve`` (-> ``NodesRetrievedEvent``; the passages a
    draft-check gate checked, as ``decision_nodes`` gives them, instead of a second
    retrieval) then ``synthesize``; ``answer_directly`` (the LLM alone, ``direct_prompt``);
    ``answer_with_draft`` (the gate's draft, no LLM call). The routing event and the
    retrieved nodes are also written to the event stream, so
    ``handler.stream_events()`` shows each decision as it is taken::

        workflow = AdaptiveRAGWorkflow(gate, index, llm=llm)
        handler = workflow.run(query="Who wrote Hamlet?")
        async for event in handler.stream_events():
            ...
        response = await handler

    The result is a ``Response`` whose ``metadata`` holds the decision under
    ``"gate_decision"`` and the route under ``"gate_route"`` (as the adaptive query
    engine's), and whose ``source_nodes`` are the retrieved nodes.

    Args:
        gate: any gate of the core.
        retriever: a retriever, or an index whose ``as_retriever`` is used.
        llm: the LLM answering (default ``Settings.llm``).
        response_synthesizer: synthesises retrieved nodes (default:
            ``get_response_synthesizer(llm=llm)``).
        direct_prompt: the direct answer's prompt (``{query_str}`` is the slot).
        similarity_top_k: nodes to retrieve, when ``retriever`` is an index.
        reuse_draft: answer with the gate's draft when it has one.
        shadow_rate: shadow learning (see ``AdaptiveQueryEngine`` and
            ``docs/shadow_learning.md``): the pair of each decision answered over the
            passages the gate checked (its draft, the synthesised answer) is recorded
            with the gate, and a share ``shadow_rate`` of the decisions answered
            without them are also answered over those passages by the response
            synthesizer (one extra LLM call, never returned). It runs in a worker
            thread once the answer is made; a failure is logged, never raised.
            ``None``: nothing is recorded.
        shadow_refit_every: pairs between the gate's refits.
        shadow_learner: the ``ShadowLearner`` to use instead of ``shadow_rate``'s
            (``workflow.shadow_learner`` is the one in use).
        **workflow_kwargs: for ``Workflow`` (``timeout``, ``verbose``, ...).
    """

    def __init__(
        self,
        gate: Gate,
        retriever: BaseRetriever | BaseIndex,
        llm: LLM | None = None,
        *,
        response_synthesizer: BaseSynthesizer | None = None,
        direct_prompt: BasePromptTemplate | None = None,
        similarity_top_k: int | None = None,
        reuse_draft: bool = True,
        shadow_rate: float | None = None,
        shadow_refit_every: int = DEFAULT_REFIT_EVERY,
        shadow_learner: ShadowLearner | None = None,
        **workflow_kwargs: Any,
    ) -> None:
        super().__init__(**workflow_kwargs)
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        if isinstance(retriever, BaseIndex):
            retriever = retriever.as_retriever(
                **({} if similarity_top_k is None else {"similarity_top_k": similarity_top_k})
            )
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a LlamaIndex BaseRetriever or index, got {type(retriever).__name__}")
        self.gate = gate
        self.retriever = retriever
        self.llm = llm or Settings.llm
        self.response_synthesizer = response_synthesizer or get_response_synthesizer(llm=self.llm)
        self.direct_prompt = direct_prompt or DEFAULT_DIRECT_PROMPT
        self.reuse_draft = reuse_draft
        self.shadow_learner = door_learner(gate, shadow_rate, shadow_refit_every, shadow_learner)

    @step
    async def decide(self, ctx: Context, ev: StartEvent) -> RetrieveEvent | AnswerDirectlyEvent | DraftAnswerEvent:
        """The gate routes ``query`` (``workflow.run(query=...)``)."""
        routed = await gate_route_event(self.gate, ev.get("query"), self.reuse_draft)
        ctx.write_event_to_stream(routed)
        return routed

    @step
    async def retrieve(self, ctx: Context, ev: RetrieveEvent) -> NodesRetrievedEvent:
        """The retriever's nodes for the query; the passages the gate checked when it
        retrieved to decide (a draft-check gate), with no second retrieval."""
        nodes = decision_nodes(ev.decision)
        if nodes is None:
            nodes = await self.retriever.aretrieve(ev.query)
        retrieved = NodesRetrievedEvent(query=ev.query, decision=ev.decision, nodes=nodes)
        ctx.write_event_to_stream(retrieved)
        return retrieved

    @step
    async def synthesize(self, ev: NodesRetrievedEvent) -> StopEvent:
        """The answer synthesised over the retrieved nodes."""
        response = await self.response_synthesizer.asynthesize(query=ev.query, nodes=ev.nodes)
        return self._stop(Response(str(response), source_nodes=ev.nodes), ev, RETRIEVE)

    @step
    async def answer_directly(self, ev: AnswerDirectlyEvent) -> StopEvent:
        """The LLM answers alone."""
        answer = await self.llm.apredict(self.direct_prompt, query_str=ev.query)
        return self._stop(Response(answer), ev, DIRECT)

    @step
    async def answer_with_draft(self, ev: DraftAnswerEvent) -> StopEvent:
        """The gate's draft is the answer."""
        return self._stop(Response(ev.draft_answer), ev, DRAFT)

    def _stop(self, response: Response, ev: GateRouteEvent, route: str) -> StopEvent:
        """The run's result; its decision and answer handed to the shadow learner."""
        response.metadata = {**(response.metadata or {}), METADATA_KEY: ev.decision, ROUTE_KEY: route}
        answer_over = functools.partial(self._synthesized, ev.query)
        nodes, text = response.source_nodes, response.response
        learn_from_answer(self.shadow_learner, ev.decision, nodes, text, answer_over, QueryBundle(ev.query))
        return StopEvent(result=response)

    def _synthesized(self, query: str, nodes: list[NodeWithScore]) -> str:
        """The response synthesizer's answer over ``nodes`` (a shadow's)."""
        return synthesized_text(self.response_synthesizer.synthesize(query=query, nodes=nodes))


__all__ = ["AdaptiveRAGWorkflow"]
