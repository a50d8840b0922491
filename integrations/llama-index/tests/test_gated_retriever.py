"""The gated retriever over a real VectorStoreIndex, with the real kNN gate (each route
driven on purpose by its own memory) and, for its fallback, a failing and a raising gate."""

from __future__ import annotations

import pytest
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, QueryBundle
from llama_index.retrievers.adaptive_gates import METADATA_KEY, GatedNodes, GatedRetriever, bundle_decision
from llama_index.selectors.adaptive_gates import GateDecisionEvent, decision_of

from adaptive_gates import BackendError, NotFittedError, SKRKnnGate, VerbalizedGate

from .buggy_gates import buggy_gate
from .conftest import KNOWN, UNKNOWN
from .doubles import ScriptedChat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KNOWN_Q = KNOWN[0]  # "Who wrote Hamlet?": labelled known in the gate's memory
UNKNOWN_Q = UNKNOWN[0]  # the Tuvalu census question, labelled unknown


@pytest.fixture(scope="module")
def gated(index, knn_gate) -> GatedRetriever:
    return GatedRetriever(knn_gate, index.as_retriever(similarity_top_k=2))


def _ids(nodes) -> list[str]:
    return [n.node.node_id for n in nodes]


async def _both(retriever: GatedRetriever, question: str) -> list[GatedNodes]:
    return [retriever.retrieve_with_decision(question), await retriever.aretrieve_with_decision(question)]


async def test_a_known_question_retrieves_nothing_and_still_has_its_decision(gated, recorder):
    for nodes, decision in await _both(gated, KNOWN_Q):
        assert nodes == []
        assert decision.retrieve is False and decision.gate == "skr-knn" and decision.question == KNOWN_Q
    fired = recorder.of(GateDecisionEvent)
    assert [e.query for e in fired] == [KNOWN_Q] * 2 and all(e.decision["retrieve"] is False for e in fired)
    # fired inside the gated retriever's spans
    assert fired[0].span_id.startswith("GatedRetriever._retrieve-")
    assert fired[1].span_id.startswith("GatedRetriever.aretrieve-")


async def test_an_unknown_question_retrieves_nodes_that_carry_the_decision(gated, index):
    plain = index.as_retriever(similarity_top_k=2).retrieve(UNKNOWN_Q)
    for nodes, decision in await _both(gated, UNKNOWN_Q):
        assert decision.retrieve is True and decision.error is None
        assert _ids(nodes) == _ids(plain) and [n.score for n in nodes] == [n.score for n in plain]
        for node in nodes:
            assert decision_of(node) == decision
            # the decision stays out of what the LLM and the embedder read
            assert "skr-knn" not in node.node.get_content(MetadataMode.LLM)
            assert "skr-knn" not in node.node.get_content(MetadataMode.EMBED)
    stored = index.docstore.get_node(plain[0].node.node_id)
    assert METADATA_KEY not in stored.metadata  # the index's nodes are left as they were


async def test_the_query_bundle_carries_the_decision(gated):
    sync_bundle, async_bundle = QueryBundle(KNOWN_Q), QueryBundle(UNKNOWN_Q)
    assert bundle_decision(sync_bundle) is None
    gated.retrieve(sync_bundle)
    await gated.aretrieve(async_bundle)
    assert bundle_decision(sync_bundle).retrieve is False and bundle_decision(async_bundle).retrieve is True


async def test_in_a_retriever_query_engine(gated, llm):
    engine = RetrieverQueryEngine.from_args(gated, llm=llm)
    retrieved = engine.query(UNKNOWN_Q)
    assert len(retrieved.source_nodes) == 2 and decision_of(retrieved.source_nodes[0]).retrieve is True
    assert retrieved.response.strip()
    direct = await engine.aquery(KNOWN_Q)
    assert direct.source_nodes == []  # nothing retrieved: LlamaIndex's synthesizer says so
    assert direct.response == "Empty Response"


async def test_a_failing_gate_llm_gives_the_fallback_and_retrieves(index, recorder):
    gate = VerbalizedGate(ScriptedChat(BackendError("the chat server is down")))
    retriever = GatedRetriever(gate, index.as_retriever(similarity_top_k=1))
    for nodes, decision in await _both(retriever, UNKNOWN_Q):
        assert decision.retrieve is True and "the chat server is down" in decision.error
        assert len(nodes) == 1 and decision_of(nodes[0]).error == decision.error
    assert len(recorder.of(GateDecisionEvent)) == 2


async def test_a_gate_that_raises_gives_its_fallback(index, core_embedder):
    retriever = GatedRetriever(buggy_gate(core_embedder), index.as_retriever(similarity_top_k=1))
    for nodes, decision in await _both(retriever, KNOWN_Q):
        assert decision.retrieve is True and decision.error.startswith("the gate raised AttributeError")
        assert len(nodes) == 1


async def test_an_unfitted_gate_raises_not_fitted(index, core_embedder):
    retriever = GatedRetriever(SKRKnnGate(core_embedder, k=1), index.as_retriever(similarity_top_k=1))
    with pytest.raises(NotFittedError, match="SKRKnnGate is not fitted"):
        retriever.retrieve(KNOWN_Q)
    with pytest.raises(NotFittedError, match="SKRKnnGate is not fitted"):
        await retriever.aretrieve(KNOWN_Q)


def test_bad_parts_are_refused(index, knn_gate):
    with pytest.raises(TypeError, match="gate must be an adaptive_gates Gate"):
        GatedRetriever("skr", index.as_retriever())
    with pytest.raises(TypeError, match="retriever must be a LlamaIndex BaseRetriever"):
        GatedRetriever(knn_gate, index)
