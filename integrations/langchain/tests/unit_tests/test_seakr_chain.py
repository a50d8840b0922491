"""SeaKR as a runnable over a LangChain vector store of real BoolQ passages, with the
embedded SmolLM2 reasoning, measuring its uncertainty, re-ranking and selecting. The
settings are the smallest that exercise all three: the gate always fires (δ = -inf),
one step reads one of two candidates, and the final answer is chosen between the
rationale route (the paper's form: "So the final answer is" after the steps) and the
knowledge route by their uncertainty."""

import asyncio

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document

from adaptive_gates.seakr.reasoning_prompt import DEFAULT_DEMOS
from langchain_adaptive_gates import AdaptiveGatesEmbeddings, RetrieverSearch, SeaKRChain

from ..stores import faiss_store

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SETTINGS = dict(
    threshold=float("-inf"),
    max_steps=1,
    max_docs=1,
    n_candidates=2,
    rationale="append",
    demos=DEFAULT_DEMOS[:6],  # with fewer, the knowledge route seldom states its answer
    step_tokens=24,
    answer_tokens=32,
)
#: For the tests that check what happened to each input, not the answers' text: short
#: steps and answers, two demonstrations.
OUTCOME_ONLY = dict(step_tokens=8, answer_tokens=8, demos=DEFAULT_DEMOS[:2])
#: About the Barq's passage; both routes answer it, so their uncertainties decide.
QUESTION = "Is Barq's root beer a Pepsi product?"


class _Retrievals(BaseCallbackHandler):
    """The queries of the retriever runs and their parents' names."""

    def __init__(self):
        self.names = {}
        self.queries = []

    def on_chain_start(self, serialized, inputs, *, run_id, **kwargs):
        self.names[run_id] = kwargs.get("name")

    def on_retriever_start(self, serialized, query, *, parent_run_id=None, **kwargs):
        self.queries.append((query, self.names.get(parent_run_id)))


@pytest.fixture(scope="module")
def uncertainty():
    from adaptive_gates import SelfAwareUncertainty

    # Three samples decide which passage is read, and with it whether both routes answer:
    # they do under seeds 2 and 3; under 0 and 1 one route's answer comes out empty.
    return SelfAwareUncertainty(k=3, max_new_tokens=8, seed=2)


def _chain(passage_store, uncertainty, **overrides) -> SeaKRChain:
    retriever = passage_store("in-memory").as_retriever(search_kwargs={"k": 3})
    return SeaKRChain(retriever, uncertainty=uncertainty, **{**SETTINGS, **overrides})


@pytest.fixture
def chain(passage_store, uncertainty):
    return _chain(passage_store, uncertainty)


def test_seakr_retrieves_reranks_and_selects_over_a_langchain_retriever(chain, boolq):
    retrievals = _Retrievals()
    out = chain.invoke(QUESTION, {"callbacks": [retrievals]})
    trace = out["trace"]
    step = trace["steps"][0]
    assert step["retrieve"] is True and len(step["candidates"]) == 2
    assert retrievals.queries == [(step["query"], "seakr")]  # the retriever's run is the chain's child
    # the snippet read is the candidate the LLM was surest after (re-ranking by U)
    measured = [c["uncertainty"] for c in step["candidates"]]
    assert all(u is not None for u in measured)
    chosen = next(c for c in step["candidates"] if c["id"] == step["chosen"])
    assert chosen["uncertainty"] == min(measured)
    passages = {r["passage"]: r["title"] for r in boolq}
    [document] = out["documents"]
    assert isinstance(document, Document) and passages[document.page_content] == document.metadata["title"]
    assert chosen["title"] == document.metadata["title"]
    # both routes answered, so the selector chose the one it was surer of
    routes = {r["name"]: r for r in trace["routes"]}
    assert sorted(routes) == ["knowledge", "rationale"] and all(r["answer"] for r in routes.values())
    assert trace["selection_reason"] == "lower uncertainty"
    chosen_u = routes[trace["chosen_route"]]["uncertainty"]
    assert chosen_u == min(r["uncertainty"] for r in routes.values())
    assert out["answer"] == routes[trace["chosen_route"]]["answer"] == trace["answer"]


def test_async_batch_answers_each_input_and_refuses_bad_ones(passage_store, uncertainty):
    chain = _chain(passage_store, uncertainty, **OUTCOME_ONLY)
    question = "Who created Barq's root beer?"
    answered, empty, keyless = asyncio.run(
        chain.abatch([{"question": question}, "  ", {"query": question}], return_exceptions=True)
    )
    assert answered["trace"]["question"] == question and answered["trace"]["steps"][0]["retrieve"] is True
    assert len(answered["documents"]) == 1 and answered["answer"] == answered["trace"]["answer"]
    assert isinstance(empty, ValueError) and "question" in str(empty)
    assert isinstance(keyless, ValueError) and "no 'question' or 'input' key" in str(keyless)


def test_a_failing_retriever_is_recorded_and_the_question_still_answered(core_embedder, uncertainty):
    # a real store whose index was built for 8-d vectors: faiss refuses the 384-d query
    store = faiss_store(AdaptiveGatesEmbeddings(core_embedder), 8)
    out = SeaKRChain(store.as_retriever(), uncertainty=uncertainty, **{**SETTINGS, **OUTCOME_ONLY}).invoke(
        "Who wrote Hamlet?"
    )
    step = out["trace"]["steps"][0]
    assert step["retrieve"] is True and step["error"].startswith("retrieval failed: AssertionError")
    assert out["documents"] == [] and isinstance(out["answer"], str)


def test_the_search_adapter_keeps_the_retrievers_order_and_ids(passage_store, boolq):
    retriever = passage_store("in-memory").as_retriever(search_kwargs={"k": 3})
    search = RetrieverSearch(retriever)
    hits = search.search(boolq[2]["question"], k=2)
    documents = retriever.invoke(boolq[2]["question"])[:2]
    assert [h.text for h in hits] == [d.page_content for d in documents]
    assert [h.id for h in hits] == [d.id for d in documents] and hits[0].score > hits[1].score
    assert hits[0].title == documents[0].metadata["title"]
    assert search.search_batch([boolq[2]["question"]], k=2) == [hits]
    with pytest.raises(ValueError, match="k must be a positive int"):
        search.search("x", k=0)
    with pytest.raises(TypeError, match="BaseRetriever"):
        RetrieverSearch(lambda q: [])
