"""SeaKR's self-aware re-ranking (SPEC §4.3) as a LlamaIndex node postprocessor."""

from __future__ import annotations

import math
from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from adaptive_gates import UncertaintyReranker

dispatcher = get_dispatcher(__name__)

#: Metadata key of each returned node: the LLM's uncertainty U after reading it
#: (``inf`` when U is undefined, the node is empty or U could not be measured).
UNCERTAINTY_KEY = "seakr_uncertainty"
#: Metadata key set only when measuring U failed: the error, as ``"Type: message"``.
ERROR_KEY = "seakr_error"


class SeaKRRerank(BaseNodePostprocessor):
    """Orders nodes by the LLM's self-aware uncertainty U after reading each one, the
    node the model is surest after first (SeaKR's re-ranker).

    Each returned node is a copy carrying U in its metadata under ``UNCERTAINTY_KEY``
    (kept out of the LLM's and the embedder's view of the node) and ``score = -U``, so
    a higher score is better, as LlamaIndex expects; ``-inf`` when U is undefined (no
    usable sample), the node's text is empty, or measuring U failed. A failure is
    logged and recorded under ``ERROR_KEY``; that node ranks last and the query still
    answers. Ties keep the given order. Needs the query (``query_bundle`` or
    ``query_str``): U is measured for the question.

    .. code-block:: python

        index.as_query_engine(similarity_top_k=3, node_postprocessors=[SeaKRRerank(top_n=1)])

    Fires LlamaIndex's ``ReRankStartEvent`` / ``ReRankEndEvent`` inside its span and the
    callback manager's ``RERANKING`` event. The async path runs the sampling in a
    worker thread, so the event loop is never blocked.

    Args:
        reranker: the core's ``UncertaintyReranker`` (SeaKR's settings on the embedded
            LM when omitted: 20 samples per node; give a smaller ``k`` for speed, e.g.
            ``UncertaintyReranker(SelfAwareUncertainty(k=4, max_new_tokens=16))``).
        top_n: nodes kept (``None`` keeps all, re-ordered).
        max_uncertainty: drop nodes whose U is above it (``None`` keeps all).
        metadata_mode: which of the node's metadata the LLM reads with its text.
    """

    reranker: UncertaintyReranker = Field(
        default_factory=UncertaintyReranker, exclude=True, description="The core's U re-ranker."
    )
    top_n: int | None = Field(default=3, ge=1, description="Nodes kept; None keeps all.")
    max_uncertainty: float | None = Field(
        default=None, allow_inf_nan=False, description="Nodes with U above it are dropped; None keeps all."
    )
    metadata_mode: MetadataMode = Field(
        default=MetadataMode.NONE, description="Metadata the LLM reads with each node's text."
    )

    @classmethod
    def class_name(cls) -> str:
        return "SeaKRRerank"

    @property
    def model_name(self) -> str:
        """The probed model's id (reported in the re-rank events; loads the model)."""
        return self.reranker.uncertainty.lm.model_id

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None or not query_bundle.query_str.strip():
            raise ValueError("SeaKRRerank needs the query: pass query_bundle or query_str to postprocess_nodes")
        if not nodes:
            return []
        top_n = len(nodes) if self.top_n is None else self.top_n
        dispatcher.event(ReRankStartEvent(query=query_bundle, nodes=nodes, top_n=top_n, model_name=self.model_name))
        payload: dict[str, Any] = {
            EventPayload.NODES: nodes,
            EventPayload.MODEL_NAME: self.model_name,
            EventPayload.QUERY_STR: query_bundle.query_str,
            EventPayload.TOP_K: top_n,
        }
        with self.callback_manager.event(CBEventType.RERANKING, payload=payload) as event:
            ranked = self._rank(nodes, query_bundle.query_str)
            event.on_end(payload={EventPayload.NODES: ranked})
        dispatcher.event(ReRankEndEvent(nodes=ranked))
        return ranked

    def _rank(self, nodes: list[NodeWithScore], query: str) -> list[NodeWithScore]:
        measured = self._measure(query, [item.node for item in nodes])
        order = sorted(range(len(nodes)), key=lambda i: measured[i][0])  # stable: ties keep the given order
        if self.max_uncertainty is not None:
            order = [i for i in order if measured[i][0] <= self.max_uncertainty]
        if self.top_n is not None:
            order = order[: self.top_n]
        return [_with_uncertainty(nodes[i].node, *measured[i]) for i in order]

    def _measure(self, query: str, nodes: list[BaseNode]) -> list[tuple[float, str | None]]:
        """U after reading each node and, when measuring failed, why (the core re-ranker
        ranks a failed node last with its error; an empty node cannot be read: inf)."""
        texts = [node.get_content(metadata_mode=self.metadata_mode) for node in nodes]
        readable = [i for i, text in enumerate(texts) if text.strip()]
        measured: list[tuple[float, str | None]] = [(math.inf, None)] * len(nodes)
        if readable:
            for ranked in self.reranker.rerank(query, [texts[i] for i in readable]):
                measured[readable[ranked.index]] = (ranked.uncertainty, ranked.error)
        return measured


def _with_uncertainty(node: BaseNode, uncertainty: float, error: str | None) -> NodeWithScore:
    """A copy of ``node`` with U (and the error) in metadata only the reader sees."""
    added = {UNCERTAINTY_KEY: uncertainty, **({ERROR_KEY: error} if error is not None else {})}
    copy = node.model_copy()
    copy.metadata = {**node.metadata, **added}
    copy.excluded_llm_metadata_keys = _with_keys(node.excluded_llm_metadata_keys, added)
    copy.excluded_embed_metadata_keys = _with_keys(node.excluded_embed_metadata_keys, added)
    return NodeWithScore(node=copy, score=-uncertainty)


def _with_keys(keys: list[str], added: dict[str, object]) -> list[str]:
    return [*keys, *(k for k in added if k not in keys)]
