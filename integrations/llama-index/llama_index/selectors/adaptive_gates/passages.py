"""The passages a gate retrieved to decide, as LlamaIndex nodes.

A gate that checks its draft against one retrieval (the core's ``DraftCheckGate``,
``Gate.retrieves_first``) keeps the passages it checked on its decision
(``GateDecision.passages``). When it decides to retrieve, the answer is synthesised
over those passages: no engine, retriever or workflow of this package retrieves a
second time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.schema import NodeWithScore, TextNode

from adaptive_gates import GateDecision
from adaptive_gates.extend import Hit

#: Metadata keys of a node made from a gate's passage: the passage's id (kept out of
#: the text the LLM and the embedder read) and its title.
ID_KEY = "id"
TITLE_KEY = "title"


def hit_nodes(hits: Sequence[Hit]) -> list[NodeWithScore]:
    """The core's hits as scored nodes, best first: a ``TextNode`` with the passage's
    text, its id as ``id_`` and under ``metadata["id"]``, its title under
    ``metadata["title"]``, and the retriever's score as the node's score."""
    return [
        NodeWithScore(
            node=TextNode(
                id_=hit.id,
                text=hit.text,
                metadata={ID_KEY: hit.id, TITLE_KEY: hit.title},
                excluded_llm_metadata_keys=[ID_KEY],
                excluded_embed_metadata_keys=[ID_KEY],
            ),
            score=hit.score,
        )
        for hit in hits
    ]


def decision_nodes(decision: GateDecision | Mapping[str, Any]) -> list[NodeWithScore] | None:
    """The nodes to answer a retrieving ``decision`` over: the passages its gate
    retrieved to decide, as ``hit_nodes`` makes them.

    ``None`` when the decision does not retrieve, or its gate retrieved nothing to
    decide (then retrieve as usual). An empty list is an answer too: the gate's
    retrieval found nothing, and retrieving again would not be the retrieval it
    checked. ``decision`` is a ``GateDecision`` or its dict (as events carry it).
    """
    if not isinstance(decision, GateDecision):
        decision = GateDecision.from_dict(decision)
    if not decision.retrieve or decision.passages is None:
        return None
    return hit_nodes(decision.passages)


__all__ = ["decision_nodes", "hit_nodes"]
