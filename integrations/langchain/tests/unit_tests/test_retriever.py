"""GatedRetriever over real vector stores (InMemoryVectorStore and FAISS) of BoolQ
passages, encoded by the embedded MiniLM."""

import asyncio

import pytest
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import ConfigurableField, RunnableLambda

from langchain_adaptive_gates import (
    CONTROL_KEYS,
    DECISION_EVENT,
    DOCUMENT_DECISION_KEY,
    GatedRetriever,
)

KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"


@pytest.fixture(scope="module", params=["in-memory", "faiss"])
def store(request, passage_store):
    return passage_store(request.param)


def test_retrieves_only_when_the_gate_says_so(store, knn_gate):
    retriever = GatedRetriever(retriever=store.as_retriever(search_kwargs={"k": 2}), gate=knn_gate)
    assert retriever.invoke(KNOWN_Q) == []
    documents = retriever.invoke(UNKNOWN_Q)
    assert len(documents) == 2 and all("title" in d.metadata for d in documents)
    assert documents[0].metadata[DOCUMENT_DECISION_KEY]["retrieve"] is True
    assert asyncio.run(retriever.ainvoke(KNOWN_Q)) == []
    assert len(asyncio.run(retriever.ainvoke(UNKNOWN_Q))) == 2


def test_the_caller_reads_the_decision(store, knn_gate):
    retriever = GatedRetriever(retriever=store.as_retriever(search_kwargs={"k": 1}), gate=knn_gate)
    skipped = retriever.retrieve(KNOWN_Q)
    assert skipped.documents == [] and skipped.decision.retrieve is False and skipped.decision.question == KNOWN_Q
    fetched = asyncio.run(retriever.aretrieve(UNKNOWN_Q))
    assert len(fetched.documents) == 1 and fetched.decision.retrieve is True


def test_decision_is_an_event_inside_a_rag_chain(store, knn_gate):
    retriever = GatedRetriever(retriever=store.as_retriever(search_kwargs={"k": 1}), gate=knn_gate)
    prompt = ChatPromptTemplate.from_messages([("human", "Context: {context}\nQuestion: {question}")])
    chain = {"context": retriever, "question": RunnableLambda(lambda q: q)} | prompt

    async def events(q):
        return [e async for e in chain.astream_events(q, version="v2")]

    for question, retrieve in ((KNOWN_Q, False), (UNKNOWN_Q, True)):
        collected = asyncio.run(events(question))
        custom = [e for e in collected if e["event"] == "on_custom_event" and e["name"] == DECISION_EVENT]
        assert [e["data"]["retrieve"] for e in custom] == [retrieve]
        retriever_end = next(e for e in collected if e["event"] == "on_retriever_end")
        assert bool(retriever_end["data"]["output"]) is retrieve


def test_per_request_control_through_configurable(store, knn_gate):
    retriever = GatedRetriever(retriever=store.as_retriever(search_kwargs={"k": 1}), gate=knn_gate)
    forced = retriever.invoke(KNOWN_Q, {"configurable": {"gate_retrieval": "always"}})
    assert len(forced) == 1 and forced[0].metadata[DOCUMENT_DECISION_KEY]["details"] == {"forced": "always"}
    assert asyncio.run(retriever.ainvoke(UNKNOWN_Q, {"configurable": {"gate_retrieval": "never"}})) == []
    # k=1 votes 0 or 1: a threshold of 1 answers the unknown question directly.
    assert retriever.invoke(UNKNOWN_Q, {"configurable": {"gate_threshold": 1.0}}) == []
    assert retriever.batch([KNOWN_Q, KNOWN_Q], [{}, {"configurable": {"gate_retrieval": "always"}}])[0] == []
    # Inside a chain, the chain's config reaches the gate.
    chain = RunnableLambda(lambda q: q) | retriever
    assert len(chain.invoke(KNOWN_Q, {"configurable": {"gate_retrieval": "always"}})) == 1
    assert retriever.retrieve(KNOWN_Q, {"configurable": {"gate_retrieval": "always"}}).decision.retrieve is True


def test_a_gated_retriever_declares_its_gates_and_its_retrievers_keys(store, knn_gate):
    wrapped = store.as_retriever(search_kwargs={"k": 3}).configurable_fields(
        search_kwargs=ConfigurableField(id="search_kwargs")
    )
    retriever = GatedRetriever(retriever=wrapped, gate=knn_gate)
    assert sorted(spec.id for spec in retriever.config_specs) == sorted([*CONTROL_KEYS, "search_kwargs"])
    # both kinds of key reach their runnable in one call
    config = {"configurable": {"gate_retrieval": "always", "search_kwargs": {"k": 1}}}
    assert len(retriever.invoke(KNOWN_Q, config)) == 1
    assert len(retriever.invoke(UNKNOWN_Q)) == 3
    with pytest.raises(ValueError, match="did you mean 'gate_threshold'"):
        retriever.invoke(UNKNOWN_Q, {"configurable": {"gate_treshold": 1.0}})
