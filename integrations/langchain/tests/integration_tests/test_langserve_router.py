"""The README's router served with LangServe's ``add_routes`` on a FastAPI app: the
input schema it publishes is the input its routes agree on, so a string is answered on
both routes, one at a time and in a batch, and a dict the RAG route cannot read is
refused with HTTP 422 instead of failing inside the route; a router whose routes agree
on a dict answers the dict. A misspelt ``gate_`` key is refused with 422 naming it.

The chains, the documents and the gate are the README's (an SKR-kNN gate on the
packaged NQ outcomes over the embedded MiniLM; the embedded SmolLM2 answering); the
gate answers the first question directly and retrieves for the second."""

from __future__ import annotations

from operator import itemgetter

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langserve import add_routes
from pydantic import ValidationError

from adaptive_gates import SKRKnnGate
from adaptive_gates.bundled.datasets import adarague_outcomes
from langchain_adaptive_gates import AdaptiveGatesChatModel, AdaptiveGatesEmbeddings, gated_router

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DIRECT_Q = "Who wrote Hamlet?"
RETRIEVE_Q = "Who bottles Barq's root beer?"
PROMPT = "Context: {context}\n\nQuestion: {question}"


def _joined(documents):
    return "\n".join(d.page_content for d in documents)


@pytest.fixture(scope="module")
def readme(core_embedder):
    """The README's gate, retriever and chains (answers cut to 4 tokens)."""
    llm = AdaptiveGatesChatModel(max_tokens=4)
    store = InMemoryVectorStore(AdaptiveGatesEmbeddings(core_embedder))
    store.add_texts(
        [
            "Barq's is an American soft drink. Its root beer is bottled by the Coca-Cola Company.",
            "Hamlet is a tragedy written by William Shakespeare between 1599 and 1601.",
        ],
        metadatas=[{"title": "Barq's"}, {"title": "Hamlet"}],
    )
    retriever = store.as_retriever(search_kwargs={"k": 1})
    rag = (
        {"context": retriever | _joined, "question": RunnablePassthrough()}
        | ChatPromptTemplate.from_template(PROMPT)
        | llm
        | StrOutputParser()
    )
    direct = ChatPromptTemplate.from_template("{question}") | llm | StrOutputParser()
    gate = SKRKnnGate(core_embedder).fit_outcomes(adarague_outcomes("nq"))
    assert not gate.decide(DIRECT_Q).retrieve and gate.decide(RETRIEVE_Q).retrieve  # both routes run
    return {"gate": gate, "llm": llm, "retriever": retriever, "rag": rag, "direct": direct}


@pytest.fixture(scope="module")
def client(readme):
    """The README's router at ``/rag``; one whose RAG route reads the question from a
    dict (``itemgetter``) at ``/dict``."""
    by_key = (
        {"context": itemgetter("question") | readme["retriever"] | _joined, "question": itemgetter("question")}
        | ChatPromptTemplate.from_template(PROMPT)
        | readme["llm"]
        | StrOutputParser()
    )
    app = FastAPI()
    add_routes(app, gated_router(readme["gate"], direct=readme["direct"], retrieval=readme["rag"]), path="/rag")
    add_routes(app, gated_router(readme["gate"], direct=readme["direct"], retrieval=by_key), path="/dict")
    with TestClient(app) as client:
        yield client


def test_the_published_input_is_what_both_routes_read(client):
    assert client.get("/rag/input_schema").json() == {"title": "gated_router_input", "type": "string"}
    by_key = client.get("/dict/input_schema").json()
    assert by_key["required"] == ["question"] and by_key["type"] == "object"


def test_a_string_is_answered_on_both_routes_one_at_a_time_and_in_a_batch(client, readme):
    expected = [readme["direct"].invoke(DIRECT_Q), readme["rag"].invoke(RETRIEVE_Q)]
    for question, answer in zip([DIRECT_Q, RETRIEVE_Q], expected):
        response = client.post("/rag/invoke", json={"input": question})
        assert response.status_code == 200, response.text
        assert response.json()["output"] == answer
    batch = client.post("/rag/batch", json={"inputs": [DIRECT_Q, RETRIEVE_Q]})
    assert batch.status_code == 200, batch.text
    assert batch.json()["output"] == expected


def test_a_dict_the_rag_route_cannot_read_is_refused_with_422_on_both_routes(client):
    for question in (DIRECT_Q, RETRIEVE_Q):
        response = client.post("/rag/invoke", json={"input": {"question": question}})
        assert response.status_code == 422, response.text
    # LangServe's /batch validates each input itself, outside its 422 handling: the
    # schema's refusal comes out of the app (a 500 served), before any route runs.
    with pytest.raises(ValidationError, match="Input should be a valid string"):
        client.post("/rag/batch", json={"inputs": [{"question": DIRECT_Q}, {"question": RETRIEVE_Q}]})


def test_routes_that_agree_on_a_dict_answer_it_on_both_routes_and_in_a_batch(client, readme):
    expected = [readme["direct"].invoke(DIRECT_Q), readme["rag"].invoke(RETRIEVE_Q)]
    inputs = [{"question": DIRECT_Q}, {"question": RETRIEVE_Q}]
    for value, answer in zip(inputs, expected):
        response = client.post("/dict/invoke", json={"input": value})
        assert response.status_code == 200, response.text
        assert response.json()["output"] == answer
    batch = client.post("/dict/batch", json={"inputs": inputs})
    assert batch.status_code == 200, batch.text
    assert batch.json()["output"] == expected
    assert client.post("/dict/invoke", json={"input": RETRIEVE_Q}).status_code == 422


def test_a_misspelt_gate_key_is_refused_with_422_naming_it(client):
    body = {"input": DIRECT_Q, "config": {"configurable": {"gate_treshold": 0.3}}}
    response = client.post("/rag/invoke", json=body)
    assert response.status_code == 422, response.text
    assert "unknown configurable key 'gate_treshold'; did you mean 'gate_threshold'?" in response.text
    forced = {"input": DIRECT_Q, "config": {"configurable": {"gate_retrieval": "always"}}}
    assert client.post("/rag/invoke", json=forced).status_code == 200
