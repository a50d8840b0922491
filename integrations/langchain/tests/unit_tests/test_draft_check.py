"""A draft-check gate through the LangChain doors: fitted and deciding through
``LangChainRetriever`` over a real TF-IDF retriever (langchain-community's) of the
bundled HotpotQA questions' own paragraphs, drafting with the embedded SmolLM2 through
``LangChainChatModel``. A retrieving decision reaches the answer with exactly the
passages the gate checked and the user's retriever is never asked; a decision not to
retrieve is the draft, with no second LLM call."""

from __future__ import annotations

import asyncio
import logging

import pytest
from langchain_community.retrievers import TFIDFRetriever
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from pydantic import Field

from adaptive_gates import DraftCheckGate, GateDecision
from adaptive_gates.bundled.datasets import adarague_outcomes
from langchain_adaptive_gates import (
    AdaptiveGatesChatModel,
    GatedRetriever,
    GatePassagesRetriever,
    LangChainChatModel,
    LangChainRetriever,
    create_adaptive_rag_graph,
    gated_router,
    hit_documents,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Records the gate is fitted on; the questions asked come after them. Each request
#: below forces its route with a threshold, so a small fit shows the doors as well.
TRAIN = 80
#: New tokens of each draft and answer: the tests follow the passages, not the words.
TOKENS = 4
#: A per-request threshold every need score is above (the blend's scores are ranks in
#: [0, 1]), and one none is above: the scored decision retrieves, or serves its draft.
RETRIEVE = {"configurable": {"gate_threshold": -1.0}}
DRAFT = {"configurable": {"gate_threshold": 2.0}}


class CountingRetriever(BaseRetriever):
    """The user's retriever: a real retriever that keeps each query it is asked."""

    inner: BaseRetriever
    queries: list[str] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager) -> list[Document]:
        self.queries.append(query)
        return self.inner.invoke(query, {"callbacks": run_manager.get_child()})


class Prompts(BaseCallbackHandler):
    """The prompts a chat model was sent, one per call (its messages' texts joined)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.sent.extend("\n".join(m.text for m in batch) for batch in messages)


def joined(documents: list[Document]) -> str:
    return "\n".join(d.page_content for d in documents)


@pytest.fixture(scope="module")
def records():
    return adarague_outcomes("hotpotqa")[: TRAIN + 3]


@pytest.fixture(scope="module")
def tfidf(records) -> TFIDFRetriever:
    """TF-IDF over the questions' own Wikipedia paragraphs (each record carries ten)."""
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    return TFIDFRetriever.from_texts([t for _, t in unique], metadatas=[{"title": t} for t, _ in unique], k=3)


@pytest.fixture(scope="module")
def gate(records, tfidf, core_embedder) -> DraftCheckGate:
    chat = LangChainChatModel(AdaptiveGatesChatModel(max_tokens=TOKENS))
    gate = DraftCheckGate(chat, LangChainRetriever(tfidf), core_embedder, embedding_dims=8, max_tokens=TOKENS)
    return gate.fit_outcomes(records[:TRAIN])


@pytest.fixture(scope="module")
def question(records) -> str:
    return records[TRAIN].question


@pytest.fixture
def users(tfidf) -> CountingRetriever:
    return CountingRetriever(inner=tfidf)


@pytest.fixture
def prompts() -> Prompts:
    return Prompts()


@pytest.fixture
def answerer(prompts) -> AdaptiveGatesChatModel:
    """The model answering the branches (not the gate's), its prompts kept."""
    return AdaptiveGatesChatModel(max_tokens=TOKENS, callbacks=[prompts])


@pytest.fixture
def router(gate, users, answerer):
    rag = (
        {"context": GatePassagesRetriever(retriever=users) | joined, "question": RunnablePassthrough()}
        | ChatPromptTemplate.from_template("Context: {context}\n\nQuestion: {question}")
        | answerer
        | StrOutputParser()
    )
    direct = ChatPromptTemplate.from_template("{question}") | answerer | StrOutputParser()
    return gated_router(gate, direct=direct, retrieval=rag, include_decision=True)


def test_the_adapter_makes_a_langchain_retriever_the_one_the_gate_fits_and_decides_with(gate, tfidf, question):
    assert gate.is_fitted
    adapter = LangChainRetriever(tfidf)
    hits = adapter.search(question, 3)
    assert [h.text for h in hits] == [d.page_content for d in tfidf.invoke(question)]
    assert [h.score for h in hits] == [1.0, 0.5, pytest.approx(1 / 3)]  # TF-IDF's documents carry no score
    assert hits[0].title and adapter.search_batch([question, question], 2) == [hits[:2], hits[:2]]
    decision = gate.decide(question)
    assert decision.error is None and decision.passages == tuple(hits)
    # a score in the metadata is the hit's score
    scored = LangChainRetriever(
        tfidf
        | RunnableLambda(lambda ds: [Document(d.page_content, metadata={"score": 9.0 - i}) for i, d in enumerate(ds)])
    )
    assert [h.score for h in scored.search(question, 3)] == [9.0, 8.0, 7.0]


def test_a_retrieving_decision_is_answered_over_the_gates_passages_and_the_users_retriever_is_not_asked(
    router, users, prompts, question
):
    out = router.invoke(question, RETRIEVE)
    decision = GateDecision.from_dict(out["gate_decision"])
    assert out["route"] == "retrieve" and decision.gate == "draft-check" and len(decision.passages) == 3
    assert users.queries == []
    context = joined(hit_documents(decision.passages))
    assert prompts.sent == [f"Context: {context}\n\nQuestion: {question}"]  # exactly the gate's passages
    # the async path too
    again = asyncio.run(router.ainvoke(question, RETRIEVE))
    assert again["route"] == "retrieve" and users.queries == [] and prompts.sent[-1] == prompts.sent[0]


def test_a_draft_is_the_answer_without_a_second_llm_call(router, users, prompts, question):
    out = router.invoke(question, DRAFT)
    assert out["route"] == "draft" and out["answer"] == out["gate_decision"]["draft_answer"] != ""
    assert out["gate_decision"]["llm_calls"] == 1.0  # the draft, by the gate
    assert prompts.sent == [] and users.queries == []


def test_a_request_forced_to_retrieve_asks_the_users_retriever(router, users, question):
    out = router.invoke(question, {"configurable": {"gate_retrieval": "always"}})
    assert out["route"] == "retrieve" and out["gate_decision"]["passages"] is None
    assert users.queries == [question]


def test_the_graph_answers_over_the_gates_passages_or_with_the_draft(gate, users, answerer, prompts, question):
    app = create_adaptive_rag_graph(gate, users, answerer)
    state = app.invoke({"question": question}, RETRIEVE)
    passages = GateDecision.from_dict(state["gate_decision"]).passages
    assert state["documents"] == hit_documents(passages) and users.queries == []
    assert state["documents"][0].metadata == {"id": passages[0].id, "title": passages[0].title, "score": 1.0}
    context = "\n\n".join(d.page_content for d in state["documents"])  # as the graph's prompt joins them
    assert len(prompts.sent) == 1 and f"Context:\n{context}\n" in prompts.sent[0]

    drafted = app.invoke({"question": question}, DRAFT)
    assert drafted["answer"] == drafted["gate_decision"]["draft_answer"] and drafted["documents"] == []
    assert len(prompts.sent) == 1 and users.queries == []


def test_the_gated_retriever_returns_the_gates_passages(gate, users, question):
    found = GatedRetriever(retriever=users, gate=gate).retrieve(question, RETRIEVE)
    assert found.decision.retrieve and users.queries == []
    assert [d.page_content for d in found.documents] == [h.text for h in found.decision.passages]


def test_a_retrieve_branch_that_would_retrieve_again_is_warned_about(gate, users, tfidf, caplog):
    answer = ChatPromptTemplate.from_template("{context} {question}") | RunnableLambda(lambda p: p.to_string())
    direct = ChatPromptTemplate.from_template("{question}") | RunnableLambda(lambda p: p.to_string())
    with caplog.at_level(logging.WARNING, logger="langchain_adaptive_gates.router"):
        gated_router(gate, direct=direct, retrieval={"context": users, "question": RunnablePassthrough()} | answer)
    assert "retrieve a second time" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="langchain_adaptive_gates.router"):
        checked = {"context": GatePassagesRetriever(retriever=users), "question": RunnablePassthrough()}
        gated_router(gate, direct=direct, retrieval=checked | answer)
    assert caplog.text == ""
