"""``GatedRetriever``: a gate in front of any LlamaIndex retriever."""

from __future__ import annotations

from typing import Any, NamedTuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from llama_index.selectors.adaptive_gates.gating import adecide, decide
from llama_index.selectors.adaptive_gates.passages import decision_nodes
from llama_index.selectors.adaptive_gates.reason import DECISION_METADATA_KEY

from adaptive_gates import Gate, GateDecision

#: Key of each returned node's ``metadata`` holding the decision (``GateDecision.to_dict()``).
METADATA_KEY = DECISION_METADATA_KEY
#: Attribute of the ``QueryBundle`` a ``GatedRetriever`` was asked with, holding the decision.
BUNDLE_ATTRIBUTE = "gate_decision"

dispatcher = get_dispatcher(__name__)


class GatedNodes(NamedTuple):
    """What a gated retrieval returned: the nodes (empty when the gate said no) and the
    decision behind them."""

    nodes: list[NodeWithScore]
    decision: GateDecision


def bundle_decision(query_bundle: QueryBundle) -> GateDecision | None:
    """The decision a ``GatedRetriever`` took on ``query_bundle`` (``None``: none asked)."""
    decision = getattr(query_bundle, BUNDLE_ATTRIBUTE, None)
    return decision if isinstance(decision, GateDecision) else None


class GatedRetriever(BaseRetriever):
    """Asks ``gate`` per query and retrieves with ``retriever`` only when it says so.

    The decision is visible however the retriever is used:

    - each returned node is a copy whose ``metadata["gate_decision"]`` is the decision's
      dict (kept out of the text the LLM and the embedder see);
    - ``retrieve_with_decision(query)`` returns the nodes and the ``GateDecision``, also
      when the gate said no and there are no nodes;
    - the ``QueryBundle`` asked carries it (``bundle_decision(query_bundle)``);
    - it is fired as a ``GateDecisionEvent`` inside the retrieval's span.

    A ``QueryBundle`` with no text but an ``embedding`` is decided from the embedding by
    a gate that decides from vectors (SKR-kNN, SKR-cls, Thrust; the embedding must come
    from the gate's own encoder) and then retrieved for by it; any other gate refuses it
    (``InvalidQuestionError``), as every gate refuses a query with neither.

    A gate that retrieved to decide (a draft-check gate) is not followed by a second
    retrieval: a retrieving decision with passages returns them as nodes
    (``decision_nodes``: ``TextNode`` objects with ``id`` and ``title`` metadata) and
    ``retriever`` is not called.

    It is a ``BaseRetriever``, so it slots into ``RetrieverQueryEngine`` and anything
    else that takes one (a query the gate does not retrieve for is synthesised over no
    nodes). A gate whose LLM fails, or that raises, gives its fallback decision (retrieve
    unless built with ``fallback_retrieve=False``) with ``error`` set; an unfitted gate
    raises ``NotFittedError`` (``adaptive_gates.extend.decide_or_fallback``); the async path
    awaits the gate's ``adecide`` and the retriever's ``aretrieve``.

    Args:
        gate: any gate of the core.
        retriever: the retriever asked when the gate says retrieve.
        callback_manager: LlamaIndex's legacy callbacks.
    """

    def __init__(self, gate: Gate, retriever: BaseRetriever, callback_manager: CallbackManager | None = None) -> None:
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a LlamaIndex BaseRetriever, got {type(retriever).__name__}")
        self._gate = gate
        self._retriever = retriever
        super().__init__(callback_manager=callback_manager)

    @property
    def gate(self) -> Gate:
        """The gate deciding each query."""
        return self._gate

    @property
    def retriever(self) -> BaseRetriever:
        """The retriever asked when the gate says retrieve."""
        return self._retriever

    def retrieve_with_decision(self, query: QueryType) -> GatedNodes:
        """``retrieve`` with the decision behind its nodes."""
        query_bundle = _bundle(query)
        nodes = self.retrieve(query_bundle)
        return GatedNodes(nodes, _taken(query_bundle))

    async def aretrieve_with_decision(self, query: QueryType) -> GatedNodes:
        """``retrieve_with_decision`` awaited."""
        query_bundle = _bundle(query)
        nodes = await self.aretrieve(query_bundle)
        return GatedNodes(nodes, _taken(query_bundle))

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        decision, payload = decide(self._gate, query_bundle.query_str, dispatcher, query_bundle.embedding)
        setattr(query_bundle, BUNDLE_ATTRIBUTE, decision)
        if not decision.retrieve:
            return []
        checked = decision_nodes(decision)  # the passages the gate retrieved to decide
        return _marked(self._retriever.retrieve(query_bundle) if checked is None else checked, payload)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        decision, payload = await adecide(self._gate, query_bundle.query_str, dispatcher, query_bundle.embedding)
        setattr(query_bundle, BUNDLE_ATTRIBUTE, decision)
        if not decision.retrieve:
            return []
        checked = decision_nodes(decision)  # as in _retrieve
        return _marked(await self._retriever.aretrieve(query_bundle) if checked is None else checked, payload)


def _bundle(query: QueryType) -> QueryBundle:
    return QueryBundle(query) if isinstance(query, str) else query


def _taken(query_bundle: QueryBundle) -> GateDecision:
    decision = bundle_decision(query_bundle)
    if decision is None:  # only a subclass skipping _retrieve gets here
        raise RuntimeError("the retrieval took no gate decision")
    return decision


def _marked(nodes: list[NodeWithScore], payload: dict[str, Any]) -> list[NodeWithScore]:
    """Copies of ``nodes`` carrying the decision: the stored nodes stay as they were, and
    the decision stays out of the text the LLM and the embedder see."""
    marked = []
    for scored in nodes:
        node = scored.node.model_copy(deep=False)
        node.metadata = {**node.metadata, METADATA_KEY: payload}
        node.excluded_llm_metadata_keys = [*node.excluded_llm_metadata_keys, METADATA_KEY]
        node.excluded_embed_metadata_keys = [*node.excluded_embed_metadata_keys, METADATA_KEY]
        marked.append(NodeWithScore(node=node, score=scored.score))
    return marked
