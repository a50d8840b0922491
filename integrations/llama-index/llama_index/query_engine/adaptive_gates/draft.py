"""``DraftQueryEngine``: the direct route of a gated router, answering with the gate's
draft when it already has one.

A ``RouterQueryEngine`` hands the selector's decision to no engine: it only picks one.
The engine takes it from the ``GateDecisionEvent`` the selector fired for the same
question in the same thread or task (``llama_index.selectors.adaptive_gates.handoff``),
so concurrent queries never see one another's decision.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import RESPONSE_TYPE, Response
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.llms.llm import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import QueryBundle
from llama_index.core.settings import Settings
from llama_index.selectors.adaptive_gates.gating import asked_question, route_of
from llama_index.selectors.adaptive_gates.handoff import keep_decisions, take_decision

from adaptive_gates import GateDecision
from adaptive_gates.extend import DIRECT, DRAFT

from .base import DEFAULT_DIRECT_PROMPT, METADATA_KEY, ROUTE_KEY


class DraftQueryEngine(BaseQueryEngine):
    """The direct route's engine of a ``RouterQueryEngine`` with a ``GateSelector``:
    returns the gate's draft answer when the selector's decision on this very query
    has one (a confident ``VerbalizedGate``, a ``DraftCheckGate`` that does not
    retrieve), with no LLM call; otherwise answers with ``answerer``.

        RouterQueryEngine(
            selector=GateSelector(VerbalizedGate(chat)),
            query_engine_tools=[
                QueryEngineTool.from_defaults(DraftQueryEngine(llm), description="the LLM alone"),
                QueryEngineTool.from_defaults(index.as_query_engine(llm=llm), description="the documents"),
            ],
        )

    The decision comes from the ``GateDecisionEvent`` the selector fired for the same
    question in the same thread or task (see the module's doc), so concurrent queries
    keep their own. Each response's ``metadata["gate_route"]`` says ``"draft"`` or
    ``"direct"``, and ``metadata["gate_decision"]`` holds the decision when one was seen.

    Args:
        answerer: answers when there is no draft: an LLM (asked ``direct_prompt``) or
            any query engine. Default: ``Settings.llm``.
        direct_prompt: the LLM's prompt (``{query_str}`` is the slot); default the
            adaptive engine's, the prompt a verbalized gate's draft answers.
        callback_manager: LlamaIndex's legacy callbacks.
    """

    def __init__(
        self,
        answerer: LLM | BaseQueryEngine | None = None,
        direct_prompt: BasePromptTemplate | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        answerer = answerer or Settings.llm
        if not isinstance(answerer, LLM | BaseQueryEngine):
            raise TypeError(f"answerer must be a LlamaIndex LLM or query engine, got {type(answerer).__name__}")
        self._answerer = answerer
        self._direct_prompt = direct_prompt or DEFAULT_DIRECT_PROMPT
        keep_decisions()
        super().__init__(callback_manager=callback_manager or Settings.callback_manager)

    @property
    def answerer(self) -> LLM | BaseQueryEngine:
        """What answers when there is no draft."""
        return self._answerer

    def _get_prompts(self) -> PromptDictType:
        return {"direct_prompt": self._direct_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "direct_prompt" in prompts:
            self._direct_prompt = prompts["direct_prompt"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"answerer": self._answerer} if isinstance(self._answerer, BaseQueryEngine) else {}

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        decision = take_decision(asked_question(query_bundle.query_str))
        if decision is not None and route_of(decision) == DRAFT:
            return _answered(Response(decision.draft_answer), decision, DRAFT)
        if isinstance(self._answerer, BaseQueryEngine):
            response = self._answerer.query(query_bundle)
        else:
            response = Response(self._answerer.predict(self._direct_prompt, query_str=query_bundle.query_str))
        return _answered(response, decision, DIRECT)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        decision = take_decision(asked_question(query_bundle.query_str))
        if decision is not None and route_of(decision) == DRAFT:
            return _answered(Response(decision.draft_answer), decision, DRAFT)
        if isinstance(self._answerer, BaseQueryEngine):
            response = await self._answerer.aquery(query_bundle)
        else:
            response = Response(await self._answerer.apredict(self._direct_prompt, query_str=query_bundle.query_str))
        return _answered(response, decision, DIRECT)


def _answered(response: RESPONSE_TYPE, decision: GateDecision | None, route: str) -> RESPONSE_TYPE:
    """``response`` with the route taken and the decision seen in its metadata."""
    extra: dict[str, Any] = {ROUTE_KEY: route}
    if decision is not None:
        extra[METADATA_KEY] = decision.to_dict()
    response.metadata = {**(response.metadata or {}), **extra}
    return response


__all__ = ["DraftQueryEngine"]
