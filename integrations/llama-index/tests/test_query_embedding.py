"""A ``QueryBundle`` given only as its embedding (no text) is decided from that embedding
by the gates that decide from vectors (SKR-kNN here), in a ``GatedRetriever`` and a
``RouterRetriever``'s ``GateSelector``, over a real ``VectorStoreIndex``; a gate that
judges text refuses it with a clear error."""

from __future__ import annotations

import pytest
from llama_index.core.indices import EmptyIndex
from llama_index.core.retrievers import RouterRetriever
from llama_index.core.schema import QueryBundle
from llama_index.core.tools import RetrieverTool
from llama_index.retrievers.adaptive_gates import GatedRetriever
from llama_index.selectors.adaptive_gates import GateSelector, decision_of

from adaptive_gates import InvalidQuestionError, PopularityGate
from adaptive_gates.extend import VECTOR_QUESTION

from .conftest import KNOWN, UNKNOWN

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def embedded(embed_model, question: str) -> QueryBundle:
    """``question`` as LlamaIndex holds a query it already embedded, with no text."""
    return QueryBundle(query_str="", embedding=embed_model.get_query_embedding(question))


def _ids(nodes) -> list[str]:
    return [n.node.node_id for n in nodes]


@pytest.mark.parametrize("question", [KNOWN[0], UNKNOWN[0]])
async def test_the_gated_retriever_decides_from_the_embedding(index, knn_gate, embed_model, question):
    gated = GatedRetriever(knn_gate, index.as_retriever(similarity_top_k=2))
    by_text = knn_gate.decide(question)
    by_text_nodes = index.as_retriever(similarity_top_k=2).retrieve(question) if by_text.retrieve else []
    for nodes, decision in (
        gated.retrieve_with_decision(embedded(embed_model, question)),
        await gated.aretrieve_with_decision(embedded(embed_model, question)),
    ):
        assert decision.error is None and decision.question == VECTOR_QUESTION
        assert decision.score == pytest.approx(by_text.score) and decision.retrieve == by_text.retrieve
        # retrieved by the embedding, as the question's text would have been
        assert _ids(nodes) == _ids(by_text_nodes)


def test_a_router_retriever_routes_by_the_embedding(index, knn_gate, embed_model):
    selector = GateSelector(knn_gate)
    router = RouterRetriever(
        selector=selector,
        retriever_tools=[
            RetrieverTool.from_defaults(EmptyIndex().as_retriever(), description="no documents"),
            RetrieverTool.from_defaults(index.as_retriever(similarity_top_k=1), description="the documents"),
        ],
    )
    assert router.retrieve(embedded(embed_model, KNOWN[0])) == []
    assert len(router.retrieve(embedded(embed_model, UNKNOWN[0]))) == 1
    selected = selector.select(["no documents", "the documents"], embedded(embed_model, UNKNOWN[0]))
    assert decision_of(selected).question == VECTOR_QUESTION and decision_of(selected).error is None


def test_a_gate_that_judges_text_refuses_an_embedding_only_query(index, embed_model):
    gated = GatedRetriever(PopularityGate(), index.as_retriever())
    with pytest.raises(InvalidQuestionError, match="only an embedding, and the popularity gate judges"):
        gated.retrieve(embedded(embed_model, UNKNOWN[0]))
