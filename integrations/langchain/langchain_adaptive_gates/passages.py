"""The passages a gate retrieved to decide, on LangChain's side, and LangChain retrievers
on the gate's side.

A gate that checks its draft against one retrieval (the core's ``DraftCheckGate``,
``Gate.retrieves_first``) keeps the passages it checked on its decision
(``GateDecision.passages``). When it decides to retrieve, the answer is made over
those passages: no door retrieves a second time. Here:

- ``decision_documents(decision)``: a retrieving decision's passages as LangChain
  ``Document`` objects (``None`` when there are none to reuse);
- ``GatePassagesRetriever``: the retriever of a router's retrieve branch, which
  returns those documents inside the branch a decision with passages chose, and asks
  the retriever it wraps otherwise;
- ``LangChainRetriever``: any LangChain retriever behind the core's ``Retriever``
  protocol, so a draft-check gate can retrieve through it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import ConfigurableFieldSpec, Runnable, RunnableConfig, ensure_config
from pydantic import Field

from adaptive_gates import GateDecision
from adaptive_gates.extend import Hit

#: Metadata keys of a document made from a gate's passage: the passage's id, its title
#: and its retriever's score (higher is better).
ID_KEY = "id"
TITLE_KEY = "title"
SCORE_KEY = "score"
#: Metadata key of a route's run config holding the decision that chose it (a router's
#: ``METADATA_KEY``).
ROUTE_DECISION_KEY = "gate_decision"


def hit_documents(hits: Sequence[Hit]) -> list[Document]:
    """The core's hits as LangChain documents, best first: the passage's text as
    ``page_content``, its id as the document's ``id``, and ``id``, ``title`` and
    ``score`` in the metadata."""
    return [
        Document(
            page_content=hit.text,
            id=hit.id,
            metadata={ID_KEY: hit.id, TITLE_KEY: hit.title, SCORE_KEY: hit.score},
        )
        for hit in hits
    ]


def decision_documents(decision: GateDecision | Mapping[str, Any]) -> list[Document] | None:
    """The documents to answer a retrieving ``decision`` over: the passages its gate
    retrieved to decide (``GateDecision.passages``), as ``hit_documents`` makes them.

    ``None`` when the decision does not retrieve, or its gate retrieved nothing to
    decide (then retrieve as usual). An empty list is an answer too: the gate's
    retrieval found nothing, and retrieving again would not be the retrieval it
    checked. ``decision`` is a ``GateDecision`` or its dict (as a graph's state and a
    route's run metadata hold it).
    """
    if not isinstance(decision, GateDecision):
        decision = GateDecision.from_dict(decision)
    if not decision.retrieve or decision.passages is None:
        return None
    return hit_documents(decision.passages)


def routed_documents(config: RunnableConfig | None) -> list[Document] | None:
    """The documents of the decision whose route this config runs in (a router puts the
    decision in its chosen route's run metadata, which every run inside inherits);
    ``None`` outside a route, or where ``decision_documents`` gives none."""
    decided = ensure_config(config).get("metadata", {}).get(ROUTE_DECISION_KEY)
    if not isinstance(decided, Mapping):
        return None
    try:
        return decision_documents(decided)
    except ValueError:  # metadata of that name that is not a decision: not ours
        return None


class GatePassagesRetriever(BaseRetriever):
    """The retriever of a gated router's retrieve branch: the passages the gate already
    retrieved, else ``retriever``'s documents.

    Put it where the branch retrieves::

        rag = {"context": GatePassagesRetriever(retriever=retriever) | joined, "question": RunnablePassthrough()} | ...
        gated_router(draft_check_gate, direct=direct, retrieval=rag)

    Inside the branch that a decision with passages chose (a draft-check gate's,
    ``decision_documents``), it returns those passages as documents (metadata ``id``,
    ``title``, ``score``) and ``retriever`` is not called; the router's decision
    reaches it through the route's run metadata (``gate_decision``), so this holds on
    every path (``invoke``, ``batch``, ``stream``, async). Anywhere else (a gate that
    retrieves nothing to decide, a request forced to retrieve, a fallback whose
    retrieval failed) it asks ``retriever`` with the call's config. ``k`` caps what
    either returns.
    """

    retriever: Runnable
    k: int | None = Field(default=None, ge=1)
    """Most documents returned (``None``: all); a call's ``k=`` overrides it."""

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """What the wrapped retriever declares: it runs with the call's config."""
        return self.retriever.config_specs

    # BaseRetriever hands _get_relevant_documents a run manager but not the config: the
    # route's documents and the request's configurable are passed along as keywords.
    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        return super().invoke(input, config, **_routed(config), **kwargs)

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        return await super().ainvoke(input, config, **_routed(config), **kwargs)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        routed: list[Document] | None = None,
        configurable: dict[str, Any] | None = None,
        k: int | None = None,
    ) -> list[Document]:
        if routed is None:
            config: RunnableConfig = {"callbacks": run_manager.get_child(), "configurable": configurable or {}}
            routed = self.retriever.invoke(query, config)
        return routed[: k or self.k]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        routed: list[Document] | None = None,
        configurable: dict[str, Any] | None = None,
        k: int | None = None,
    ) -> list[Document]:
        if routed is None:
            config: RunnableConfig = {"callbacks": run_manager.get_child(), "configurable": configurable or {}}
            routed = await self.retriever.ainvoke(query, config)
        return routed[: k or self.k]


def _routed(config: RunnableConfig | None) -> dict[str, Any]:
    """The keywords ``GatePassagesRetriever`` passes itself: the route's documents and
    the request's ``configurable``."""
    return {"routed": routed_documents(config), "configurable": dict(ensure_config(config).get("configurable") or {})}


class LangChainRetriever:
    """The core's ``Retriever`` protocol (``search(query, k)``, ``search_batch(queries,
    k)``, hits best first) over any LangChain retriever, e.g. for a draft-check gate::

        gate = DraftCheckGate(chat=LangChainChatModel(llm), retriever=LangChainRetriever(store.as_retriever()))

    The hits are the first ``k`` documents the retriever returns (it returns as many as
    it is configured to: set its own ``k`` to at least the gate's). A hit's id is the
    document's ``id`` (else ``metadata["id"]``, else a digest of its text), its title
    ``metadata["title"]``. ``search_batch`` is one ``batch`` call (LangChain runs the
    queries concurrently); called inside a runnable, the retriever's runs are children
    of the caller's.

    Scores: a LangChain retriever returns documents, not scores. When every document
    of a result carries a number under ``metadata[score_key]`` (a retriever that
    puts its similarity or BM25 score there) those are the hits' scores; otherwise
    the hits are scored by rank, 1 / (1 + rank) (1, 1/2, 1/3, ...). A draft-check gate
    reads these scores as features of the retrieval: one fitted with BM25 scores (the
    shipped ``pretrained("draft-check")``) reads rank scores, or another retriever's,
    differently, and it logs a warning when it checks drafts through a retriever of
    another class than the one it was fitted with (this class's name, whatever it
    wraps). Fit the gate through the retriever it will decide with.

    Args:
        retriever: a LangChain retriever, or any runnable from a query to documents.
        score_key: the metadata key read as a document's score (``None``: rank scores).
    """

    def __init__(self, retriever: Runnable, *, score_key: str | None = SCORE_KEY) -> None:
        if not isinstance(retriever, Runnable):
            hint = " (a vector store gives one with .as_retriever())" if hasattr(retriever, "as_retriever") else ""
            raise TypeError(f"retriever must be a LangChain retriever, got {type(retriever).__name__}{hint}")
        self.retriever = retriever
        self.score_key = score_key

    def __repr__(self) -> str:
        return f"LangChainRetriever({type(self.retriever).__name__})"

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The first ``k`` documents the retriever returns for ``query``, as hits."""
        return self._hits(self.retriever.invoke(query), _checked_k(k))

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """``search`` for each query, in one ``batch`` call."""
        k = _checked_k(k)
        if not queries:
            return []
        return [self._hits(documents, k) for documents in self.retriever.batch(list(queries))]

    def _hits(self, documents: Sequence[Document], k: int) -> list[Hit]:
        documents = list(documents)[:k]
        given = [_score(d.metadata.get(self.score_key)) if self.score_key else None for d in documents]
        scores = given if all(s is not None for s in given) else [1.0 / (1 + rank) for rank in range(len(documents))]
        return [_hit(d, float(s)) for d, s in zip(documents, scores) if s is not None]


def _checked_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return k


def _score(value: Any) -> float | None:
    """``value`` as a finite score, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _hit(document: Document, score: float) -> Hit:
    text = document.page_content
    identifier = document.id or document.metadata.get(ID_KEY) or hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]
    return Hit(id=str(identifier), text=text, score=score, title=str(document.metadata.get(TITLE_KEY) or ""))
