"""A draft-check gate through the LlamaIndex doors: fitted and deciding through
``LlamaIndexRetriever`` over a real keyword-table retriever of the bundled HotpotQA
questions' own paragraphs, drafting with the embedded SmolLM2. A retrieving decision
is answered over exactly the passages the gate checked, and the user's retriever (a
real retriever that counts its queries) is never asked; a decision not to retrieve is
the draft, with no LLM call. LLM calls are counted with a real event handler."""

from __future__ import annotations

import copy
import logging

import numpy as np
import pytest
from llama_index.core import SimpleKeywordTableIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent
from llama_index.core.query_engine import RetrieverQueryEngine, RouterQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.tools import QueryEngineTool
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
from llama_index.query_engine.adaptive_gates import (
    ROUTE_KEY,
    AdaptiveContextChatEngine,
    AdaptiveQueryEngine,
    DraftQueryEngine,
)
from llama_index.retrievers.adaptive_gates import GatedRetriever, GatePassagesRetriever, LlamaIndexRetriever
from llama_index.selectors.adaptive_gates import GateSelector, decision_of
from llama_index.workflows.adaptive_gates import AdaptiveRAGWorkflow

from adaptive_gates import DraftCheckGate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.models import LocalChatModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Records the gate is fitted on; the question asked comes after them. The tests set
#: the threshold that forces each route, so a small fit shows the doors as well.
TRAIN = 80
#: New tokens of each draft and answer: the tests follow the passages, not the words.
TOKENS = 4


class CountingRetriever(BaseRetriever):
    """The user's retriever: a real retriever that keeps each query it is asked."""

    def __init__(self, inner: BaseRetriever) -> None:
        self.inner = inner
        self.queries: list[str] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.queries.append(query_bundle.query_str)
        return self.inner.retrieve(query_bundle)


@pytest.fixture(scope="module")
def records():
    return adarague_outcomes("hotpotqa")[: TRAIN + 1]


@pytest.fixture(scope="module")
def keywords(records) -> BaseRetriever:
    """A keyword table over the questions' own Wikipedia paragraphs (each record carries
    ten): LlamaIndex's own retriever that needs no LLM and no embedding."""
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    nodes = [TextNode(id_=f"h{i}", text=text, metadata={"title": title}) for i, (title, text) in enumerate(unique)]
    return SimpleKeywordTableIndex(nodes).as_retriever(retriever_mode="simple", num_chunks_per_query=3)


@pytest.fixture(scope="module")
def gate(records, keywords, core_embedder) -> DraftCheckGate:
    gate = DraftCheckGate(
        LocalChatModel(), LlamaIndexRetriever(keywords), core_embedder, embedding_dims=8, max_tokens=TOKENS
    )
    return gate.fit_outcomes(records[:TRAIN])


def _at_rate(gate: DraftCheckGate, rate: float) -> DraftCheckGate:
    """The fitted gate with a threshold every need score is above (``rate`` 1) or none
    is (``rate`` 0): the blend's scores are ranks in [0, 1]."""
    return copy.copy(gate).calibrate_scores(np.linspace(0.0, 1.0, 21), target_rate=rate)


@pytest.fixture(scope="module")
def retrieving(gate) -> DraftCheckGate:
    return _at_rate(gate, 1.0)


@pytest.fixture(scope="module")
def drafting(gate) -> DraftCheckGate:
    return _at_rate(gate, 0.0)


@pytest.fixture(scope="module")
def question(records) -> str:
    return records[TRAIN].question


@pytest.fixture(scope="module")
def answerer() -> AdaptiveGatesLLM:
    return AdaptiveGatesLLM(max_tokens=TOKENS)


@pytest.fixture
def users(index) -> CountingRetriever:
    return CountingRetriever(index.as_retriever(similarity_top_k=2))


def _texts(nodes) -> list[str]:
    return [n.node.get_content() for n in nodes]


def test_the_adapter_makes_a_llamaindex_retriever_the_one_the_gate_fits_and_decides_with(
    gate, keywords, index, question
):
    assert gate.is_fitted
    hits = LlamaIndexRetriever(keywords).search(question, 3)
    assert [h.id for h in hits] == [n.node.node_id for n in keywords.retrieve(question)][:3]
    assert [h.score for h in hits] == [1.0, 0.5, pytest.approx(1 / 3)]  # a keyword table scores nothing
    assert all(h.title for h in hits) and gate.decide(question).passages == tuple(hits)
    similar = index.as_retriever(similarity_top_k=2).retrieve(question)  # a vector index scores
    assert [h.score for h in LlamaIndexRetriever(index.as_retriever(similarity_top_k=2)).search(question, 2)] == [
        n.score for n in similar
    ]


def _router(gate, answerer, users) -> RouterQueryEngine:
    return RouterQueryEngine(
        selector=GateSelector(gate),
        query_engine_tools=[
            QueryEngineTool.from_defaults(DraftQueryEngine(answerer), description="the LLM alone"),
            QueryEngineTool.from_defaults(
                RetrieverQueryEngine.from_args(GatePassagesRetriever(users), llm=answerer), description="the documents"
            ),
        ],
        llm=answerer,
    )


async def test_a_router_answers_over_the_gates_passages(retrieving, answerer, users, question, recorder):
    router = _router(retrieving, answerer, users)
    for response in (router.query(question), await router.aquery(question)):
        decision = decision_of(response)
        assert decision.retrieve and _texts(response.source_nodes) == [h.text for h in decision.passages]
        assert [n.node.metadata["title"] for n in response.source_nodes] == [h.title for h in decision.passages]
    assert users.queries == [] and len(recorder.of(LLMChatStartEvent)) == 2  # the answers, nothing more


def test_a_router_serves_the_draft_with_no_llm_call(drafting, answerer, users, question, recorder):
    drafted = _router(drafting, answerer, users).query(question)
    assert drafted.metadata[ROUTE_KEY] == "draft" and drafted.response == decision_of(drafted).draft_answer != ""
    assert recorder.of(LLMChatStartEvent) == [] and users.queries == []


def test_the_adaptive_engines_answer_over_the_gates_passages_or_with_the_draft(
    retrieving, drafting, answerer, users, question, recorder
):
    response = AdaptiveQueryEngine(retrieving, users, llm=answerer).query(question)
    assert response.metadata[ROUTE_KEY] == "retrieve"
    assert _texts(response.source_nodes) == [h.text for h in decision_of(response).passages]
    chat = AdaptiveContextChatEngine.from_defaults(retrieving, users, llm=answerer).chat(question)
    assert _texts(chat.source_nodes) == [h.text for h in decision_of(chat).passages]
    assert users.queries == []

    recorder.events.clear()
    drafted = AdaptiveQueryEngine(drafting, users, llm=answerer).query(question)
    assert drafted.metadata[ROUTE_KEY] == "draft" and recorder.of(LLMChatStartEvent) == []


async def test_the_gated_retriever_and_the_workflow_reuse_the_passages(retrieving, answerer, users, question):
    nodes, decision = GatedRetriever(retrieving, users).retrieve_with_decision(question)
    assert _texts(nodes) == [h.text for h in decision.passages] and nodes[0].score == decision.passages[0].score

    answered = await AdaptiveRAGWorkflow(retrieving, users, llm=answerer).run(query=question)
    assert _texts(answered.source_nodes) == [h.text for h in decision_of(answered).passages]
    assert users.queries == []


def test_without_a_decision_the_passages_retriever_asks_its_retriever(users, question):
    found = GatePassagesRetriever(users).retrieve(question)  # no selector decided this query
    assert len(found) == 2 and users.queries == [question]


def _plain_router(gate, answerer, users) -> RouterQueryEngine:
    """A router whose retrieve choice is a plain query engine over the user's retriever."""
    return RouterQueryEngine(
        selector=GateSelector(gate),
        query_engine_tools=[
            QueryEngineTool.from_defaults(DraftQueryEngine(answerer), description="the LLM alone"),
            QueryEngineTool.from_defaults(
                RetrieverQueryEngine.from_args(users, llm=answerer), description="the documents"
            ),
        ],
        llm=answerer,
    )


def _twice_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retrieves a second time" in r.getMessage()]


async def test_a_router_whose_retrieve_choice_retrieves_again_warns_once(retrieving, answerer, users, question, caplog):
    """The retrieve choice over the user's retriever (a vector index's) reads no passages:
    each query retrieves twice, and the selector says so once, through ``logging``."""
    caplog.set_level(logging.WARNING, logger="llama_index.selectors.adaptive_gates")
    router = _plain_router(retrieving, answerer, users)
    for response in (router.query(question), await router.aquery(question)):
        assert decision_of(response).retrieve and decision_of(response).passages
    assert users.queries == [question, question]  # the second retrieval, each time
    (warning,) = _twice_warnings(caplog)
    assert f"the gate {retrieving.name} retrieves to decide" in warning
    assert "GatePassagesRetriever(retriever)" in warning and repr(question) in warning


async def test_a_router_reading_the_gates_passages_does_not_warn(retrieving, answerer, users, question, caplog):
    caplog.set_level(logging.WARNING, logger="llama_index.selectors.adaptive_gates")
    router = _router(retrieving, answerer, users)
    router.query(question)
    await router.aquery(question)
    assert users.queries == [] and _twice_warnings(caplog) == []
