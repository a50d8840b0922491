"""SeaKR's self-aware re-ranking (SPEC §4.3) as a LlamaIndex node postprocessor."""

from __future__ import annotations

import math
from typing import Any, Self

from llama_index.core.bridge.pydantic import Field, field_serializer, field_validator
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from adaptive_gates import InvalidQuestionError, UncertaintyReranker

from .settings import fast_reranker, paper_reranker, reranker_from_settings, reranker_settings

dispatcher = get_dispatcher(__name__)

#: Metadata key of each returned node: the LLM's uncertainty U after reading it
#: (``inf`` when U is undefined, the node is empty or U could not be measured).
UNCERTAINTY_KEY = "seakr_uncertainty"
#: Metadata key set only when measuring U failed: the error, as ``"Type: message"``.
ERROR_KEY = "seakr_error"
#: Metadata key of the node's score before re-ranking (``keep_retrieval_score=True``),
#: the key LlamaIndex's ``SentenceTransformerRerank`` uses.
RETRIEVAL_SCORE_KEY = "retrieval_score"


class SeaKRRerank(BaseNodePostprocessor):
    """Orders nodes by the LLM's self-aware uncertainty U after reading each one, the
    node the model is surest after first (SeaKR's re-ranker).

    Each returned node is a copy carrying U in its metadata under ``UNCERTAINTY_KEY``
    (kept out of the LLM's and the embedder's view of the node) and ``score = -U``, so
    a higher score is better, as LlamaIndex expects; ``-inf`` when U is undefined (no
    usable sample), the node's text is empty, or measuring U failed. With
    ``keep_retrieval_score=True`` the score the node came with stays in its metadata
    under ``RETRIEVAL_SCORE_KEY`` (as ``SentenceTransformerRerank`` keeps it). A failure
    is logged and recorded under ``ERROR_KEY``; that node ranks last and the query still
    answers. Ties keep the given order. Needs the query (``query_bundle`` or
    ``query_str``): U is measured for the question.

    .. code-block:: python

        index.as_query_engine(similarity_top_k=3, node_postprocessors=[SeaKRRerank(top_n=1)])

    Speed: U samples answers after each node. The default samples 4 answers of at most
    16 tokens per node (``FAST_SAMPLING``): a 3-node query of Wikipedia paragraphs on
    the embedded SmolLM2 took 8.6 s of one CPU core here. SeaKR's paper samples k=20
    answers of up to 100 tokens (``PAPER_SAMPLING``; 24.3 s on the same query), for a
    steadier U: ``SeaKRRerank.with_paper_settings()``, or any
    ``UncertaintyReranker(SelfAwareUncertainty(k=..., max_new_tokens=...))``.

    ``to_dict`` / ``to_json`` write the re-ranker's settings (the estimator's sampling,
    layer and form, the prompt template, the stops), and ``from_dict`` / ``from_json``
    rebuild it as it was. A re-ranker probing a model given as an object cannot be
    named in JSON: serialising it raises ``ValueError`` (pass it again when loading:
    ``SeaKRRerank.from_dict(data, reranker=...)``).

    Fires LlamaIndex's ``ReRankStartEvent`` / ``ReRankEndEvent`` inside its span and the
    callback manager's ``RERANKING`` event. The async path runs the sampling in a
    worker thread, so the event loop is never blocked.

    Args:
        reranker: the core's ``UncertaintyReranker`` (default: SeaKR's U on the embedded
            LM with ``FAST_SAMPLING``); in ``from_dict``, its settings as written by
            ``to_dict``.
        top_n: nodes kept (``None`` keeps all, re-ordered).
        max_uncertainty: drop nodes whose U is above it (``None`` keeps all).
        metadata_mode: which of the node's metadata the LLM reads with its text.
        keep_retrieval_score: keep each node's incoming score under
            ``RETRIEVAL_SCORE_KEY``.
    """

    reranker: UncertaintyReranker = Field(default_factory=fast_reranker, description="The core's U re-ranker.")
    top_n: int | None = Field(default=3, ge=1, description="Nodes kept; None keeps all.")
    max_uncertainty: float | None = Field(
        default=None, allow_inf_nan=False, description="Nodes with U above it are dropped; None keeps all."
    )
    metadata_mode: MetadataMode = Field(
        default=MetadataMode.NONE, description="Metadata the LLM reads with each node's text."
    )
    keep_retrieval_score: bool = Field(
        default=False, description="Keep each node's incoming score in its metadata under 'retrieval_score'."
    )

    @field_validator("reranker", mode="before")
    @classmethod
    def _reranker_from_settings(cls, value: Any) -> Any:
        """A re-ranker's settings (``to_dict``'s form) become the re-ranker."""
        return reranker_from_settings(value) if isinstance(value, dict) else value

    @field_serializer("reranker")
    def _reranker_settings(self, reranker: UncertaintyReranker) -> dict[str, Any]:
        return reranker_settings(reranker)

    @classmethod
    def with_paper_settings(cls, **fields: Any) -> Self:
        """A re-ranker sampling as SeaKR's paper does (``PAPER_SAMPLING``: k=20 answers
        of up to 100 tokens per node) on the embedded LM; ``fields`` are the other
        fields (``top_n``, ...)."""
        return cls(reranker=paper_reranker(), **fields)

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
            raise InvalidQuestionError(
                "SeaKRRerank needs the query's text, which U is measured for: pass a non-empty"
                f" query_bundle or query_str to postprocess_nodes (got {query_bundle!r})"
            )
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
        return [self._ranked(nodes[i], *measured[i]) for i in order]

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

    def _ranked(self, given: NodeWithScore, uncertainty: float, error: str | None) -> NodeWithScore:
        """A copy of the given node scored ``-U``, with U (the error, the retrieval
        score) in metadata only the reader sees."""
        added: dict[str, object] = {UNCERTAINTY_KEY: uncertainty}
        if error is not None:
            added[ERROR_KEY] = error
        if self.keep_retrieval_score:
            added[RETRIEVAL_SCORE_KEY] = given.score
        node = given.node
        copy = node.model_copy()
        copy.metadata = {**node.metadata, **added}
        copy.excluded_llm_metadata_keys = _with_keys(node.excluded_llm_metadata_keys, added)
        copy.excluded_embed_metadata_keys = _with_keys(node.excluded_embed_metadata_keys, added)
        return NodeWithScore(node=copy, score=-uncertainty)


def _with_keys(keys: list[str], added: dict[str, object]) -> list[str]:
    return [*keys, *(k for k in added if k not in keys)]
