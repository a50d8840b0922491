"""A router's retrieve route over the passages its gate already retrieved, and any
LlamaIndex retriever behind the core's ``Retriever`` protocol.

- ``GatePassagesRetriever``: the retriever of a ``RouterQueryEngine``'s (or
  ``RouterRetriever``'s) retrieve choice under a ``GateSelector``: the passages a
  draft-check gate checked, as nodes, instead of a second retrieval;
- ``LlamaIndexRetriever``: ``search(query, k)`` / ``search_batch(queries, k)`` over a
  LlamaIndex retriever, so a draft-check gate can retrieve through it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, QueryType
from llama_index.selectors.adaptive_gates.gating import asked_question
from llama_index.selectors.adaptive_gates.handoff import keep_decisions, passages_read, take_decision
from llama_index.selectors.adaptive_gates.passages import decision_nodes

from adaptive_gates.extend import Hit


class GatePassagesRetriever(BaseRetriever):
    """The retrieve choice's retriever of a router whose ``GateSelector`` gate retrieves
    to decide (a draft-check gate): the passages the gate checked, else ``retriever``'s
    nodes.

        RouterQueryEngine(
            selector=GateSelector(draft_check_gate),
            query_engine_tools=[
                QueryEngineTool.from_defaults(DraftQueryEngine(llm), description="the LLM alone"),
                QueryEngineTool.from_defaults(
                    RetrieverQueryEngine.from_args(GatePassagesRetriever(index.as_retriever()), llm=llm),
                    description="the documents",
                ),
            ],
        )

    When the selector's decision on this very query retrieves and carries passages
    (``decision_nodes``: ``TextNode`` objects with ``id`` and ``title`` metadata, the
    retriever's scores), those are the nodes and ``retriever`` is not called. The
    decision is taken from the ``GateDecisionEvent`` the selector fired in the same
    thread or task (``llama_index.selectors.adaptive_gates.handoff``), as
    ``DraftQueryEngine`` takes it. Otherwise (a gate that retrieves nothing to decide,
    no selector before it) it asks ``retriever``.

    Args:
        retriever: the retriever asked when there are no passages to reuse.
        callback_manager: LlamaIndex's legacy callbacks.
    """

    def __init__(self, retriever: BaseRetriever, callback_manager: CallbackManager | None = None) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a LlamaIndex BaseRetriever, got {type(retriever).__name__}")
        self._retriever = retriever
        keep_decisions()
        super().__init__(callback_manager=callback_manager)

    @property
    def retriever(self) -> BaseRetriever:
        """The retriever asked when there are no passages to reuse."""
        return self._retriever

    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        passages_read()  # before the retrieval's start event: this is no second retrieval
        return super().retrieve(str_or_query_bundle)

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        passages_read()
        return await super().aretrieve(str_or_query_bundle)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        checked = _checked(query_bundle)
        return checked if checked is not None else self._retriever.retrieve(query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        checked = _checked(query_bundle)
        return checked if checked is not None else await self._retriever.aretrieve(query_bundle)


def _checked(query_bundle: QueryBundle) -> list[NodeWithScore] | None:
    if query_bundle.embedding is not None and not query_bundle.query_str.strip():
        return None  # a query given as its embedding: no decision is kept under a text
    decision = take_decision(asked_question(query_bundle.query_str))
    return None if decision is None else decision_nodes(decision)


class LlamaIndexRetriever:
    """The core's ``Retriever`` protocol (``search(query, k)``, ``search_batch(queries,
    k)``, hits best first) over any LlamaIndex retriever, e.g. for a draft-check gate::

        gate = DraftCheckGate(chat=LlamaIndexChatModel(llm), retriever=LlamaIndexRetriever(index.as_retriever()))

    The hits are the first ``k`` nodes the retriever returns (it returns as many as it
    is configured to: set its ``similarity_top_k`` to at least the gate's ``k``). A
    hit's id is the node's id, its text the node's content without metadata, its
    title ``metadata["title"]``. ``search_batch`` asks the retriever once per query.

    Scores: when every node of a result has a score (a vector index's similarity),
    those are the hits' scores; otherwise (a keyword table, a retriever that scores
    nothing) the hits are scored by rank, 1 / (1 + rank) (1, 1/2, 1/3, ...). A
    draft-check gate reads these scores as features of the retrieval: one fitted with
    BM25 scores (the shipped ``pretrained("draft-check")``) reads similarities or rank
    scores differently, and it logs a warning when it checks drafts through a
    retriever of another class than the one it was fitted with (this class's name,
    whatever it wraps). Fit the gate through the retriever it will decide with.

    Args:
        retriever: a LlamaIndex retriever.
    """

    def __init__(self, retriever: BaseRetriever) -> None:
        if not isinstance(retriever, BaseRetriever):
            hint = " (an index gives one with .as_retriever())" if hasattr(retriever, "as_retriever") else ""
            raise TypeError(f"retriever must be a LlamaIndex BaseRetriever, got {type(retriever).__name__}{hint}")
        self.retriever = retriever

    def __repr__(self) -> str:
        return f"LlamaIndexRetriever({type(self.retriever).__name__})"

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The first ``k`` nodes the retriever returns for ``query``, as hits."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        return _hits(self.retriever.retrieve(query)[:k])

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """``search`` for each query."""
        return [self.search(query, k) for query in queries]


def _hits(nodes: Sequence[NodeWithScore]) -> list[Hit]:
    given = [n.score for n in nodes]
    if not all(s is not None and math.isfinite(s) for s in given):
        given = [1.0 / (1 + rank) for rank in range(len(nodes))]
    return [
        Hit(
            id=n.node.node_id,
            text=n.node.get_content(metadata_mode=MetadataMode.NONE),
            score=float(score or 0.0),
            title=str(n.node.metadata.get("title") or ""),
        )
        for n, score in zip(nodes, given)
    ]


__all__ = ["GatePassagesRetriever", "LlamaIndexRetriever"]
