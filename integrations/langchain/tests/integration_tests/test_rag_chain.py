"""An existing RAG chain over real BoolQ passages gets a router; SeaKR ranks documents."""

import asyncio

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from adaptive_gates import ReasoningSelector, UncertaintyReranker
from langchain_adaptive_gates import (
    UNCERTAINTY_KEY,
    AnswerSelector,
    GatedRetriever,
    SeaKRCompressor,
    gated_router,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Prompts(BaseCallbackHandler):
    def __init__(self):
        self.prompts = []

    def on_chat_model_start(self, serialized, messages, **kwargs):
        self.prompts.extend(m.text for batch in messages for m in batch)


@pytest.mark.parametrize("kind", ["in-memory", "faiss"])
def test_router_over_a_real_rag_chain(kind, brief_passage_store, knn_gate, chat_llm, brief_boolq):
    store = brief_passage_store(kind)
    rag_prompt = ChatPromptTemplate.from_messages([("human", "Context: {context}\nAnswer yes or no: {question}")])
    rag = (
        {"context": store.as_retriever(search_kwargs={"k": 1}), "question": RunnablePassthrough()}
        | rag_prompt
        | chat_llm
        | StrOutputParser()
    )
    direct = (
        ChatPromptTemplate.from_messages([("human", "Answer yes or no: {question}")]) | chat_llm | StrOutputParser()
    )
    router = gated_router(knn_gate, direct=direct, retrieval=rag)
    question = brief_boolq[0]["question"] + "?"
    prompts = _Prompts()
    answers = router.batch(["Who wrote Macbeth?", question], {"callbacks": [prompts]})
    assert all(isinstance(a, str) and a.strip() for a in answers)
    assert len(prompts.prompts) == 2
    direct_prompt, rag_prompt_text = sorted(prompts.prompts, key=len)
    assert "Context:" not in direct_prompt and "Macbeth" in direct_prompt
    assert "Context:" in rag_prompt_text and brief_boolq[0]["passage"][:40] in rag_prompt_text
    assert asyncio.run(router.ainvoke(question)).strip()


def test_seakr_compressor_in_contextual_compression(brief_passage_store, small_uncertainty, brief_boolq):
    store = brief_passage_store("in-memory")
    # Two candidates, one kept: the fewest that show the ranking and the cut (the order of
    # several kept documents is checked below, with top_n=None).
    compressor = SeaKRCompressor(reranker=UncertaintyReranker(small_uncertainty), top_n=1)
    retriever = ContextualCompressionRetriever(
        base_compressor=compressor, base_retriever=store.as_retriever(search_kwargs={"k": 2})
    )
    question = brief_boolq[1]["question"] + "?"
    documents = retriever.invoke(question)
    assert len(documents) == 1
    scores = [d.metadata[UNCERTAINTY_KEY] for d in documents]
    assert all("title" in d.metadata for d in documents)
    candidates = store.similarity_search(question, k=2)
    expected = UncertaintyReranker(small_uncertainty).rerank(question, [d.page_content for d in candidates])
    assert [d.page_content for d in documents] == [r.text for r in expected[:1]]
    assert scores == pytest.approx([expected[0].uncertainty]) and expected[0].uncertainty < expected[1].uncertainty
    again = asyncio.run(retriever.ainvoke(question))
    assert [d.metadata[UNCERTAINTY_KEY] for d in again] == scores


def test_empty_documents_rank_last(small_uncertainty):
    from langchain_core.documents import Document

    compressor = SeaKRCompressor(reranker=UncertaintyReranker(small_uncertainty), top_n=None)
    given = [
        Document(page_content="  ", id="empty"),
        Document(page_content="Paris is the capital of France.", id="paris", metadata={"title": "France"}),
    ]
    out = compressor.compress_documents(given, "What is the capital of France?")
    assert [d.id for d in out] == ["paris", "empty"] and out[1].metadata[UNCERTAINTY_KEY] == float("inf")
    assert out[0].metadata["title"] == "France" and out[0].metadata[UNCERTAINTY_KEY] < float("inf")
    assert given[1].metadata == {"title": "France"}  # the caller's documents are left as they were
    # awaited, LangChain's own executor runs the same re-ranking
    awaited = asyncio.run(compressor.acompress_documents(given, "What is the capital of France?"))
    assert [(d.id, d.metadata[UNCERTAINTY_KEY]) for d in awaited] == [(d.id, d.metadata[UNCERTAINTY_KEY]) for d in out]


def test_answer_selector_runnable(small_uncertainty):
    selector = AnswerSelector(selector=ReasoningSelector(small_uncertainty))
    only = selector.invoke([{"answer": "unknown", "name": "rationale"}, {"answer": "Paris", "name": "knowledge"}])
    assert only.answer == "Paris" and only.reason == "only usable answer"
    prompt = "Question: What is the capital of France?\nAnswer:"
    chosen = asyncio.run(
        selector.ainvoke(
            [{"answer": "Paris", "prompt": prompt, "name": "a"}, {"answer": "Lyon", "uncertainty": 1e9, "name": "b"}]
        )
    )
    assert chosen.answer == "Paris" and chosen.reason == "lower uncertainty" and chosen.uncertainties[0] is not None
    with pytest.raises(ValueError, match="unknown keys"):
        selector.invoke([{"answer": "x", "score": 1}])


def test_a_failing_document_ranks_last_with_its_error_as_seakr_rerank_does(small_uncertainty):
    from langchain_core.documents import Document

    from adaptive_gates import BackendError, SelfAwareUncertainty
    from langchain_adaptive_gates import ERROR_KEY

    class FailingOnLyon(SelfAwareUncertainty):
        def estimate(self, prompt, **kwargs):
            if "Lyon" in prompt:
                raise BackendError("the probing model ran out of memory")
            return super().estimate(prompt, **kwargs)

    uncertainty = FailingOnLyon(k=small_uncertainty.k, max_new_tokens=small_uncertainty.max_new_tokens)
    compressor = SeaKRCompressor(reranker=UncertaintyReranker(uncertainty), top_n=None)
    given = [
        Document(page_content="Lyon is a city in France.", id="lyon"),
        Document(page_content="Paris is the capital of France.", id="paris"),
    ]
    out = compressor.compress_documents(given, "What is the capital of France?")
    assert [d.id for d in out] == ["paris", "lyon"]
    assert out[1].metadata == {
        UNCERTAINTY_KEY: float("inf"),
        ERROR_KEY: "BackendError: the probing model ran out of memory",
    }
    assert ERROR_KEY not in out[0].metadata and out[0].metadata[UNCERTAINTY_KEY] < float("inf")
    # awaited, the same ranking and the same recorded error
    awaited = asyncio.run(compressor.acompress_documents(given, "What is the capital of France?"))
    assert [(d.id, d.metadata) for d in awaited] == [(d.id, d.metadata) for d in out]


def test_the_compressor_and_the_retriever_refuse_unknown_fields(knn_gate):
    from langchain_core.runnables import RunnableLambda
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="top"):
        SeaKRCompressor(top=1)
    with pytest.raises(ValidationError, match="UncertaintyReranker"):
        SeaKRCompressor(reranker="seakr")
    with pytest.raises(ValidationError, match="kk"):
        GatedRetriever(retriever=RunnableLambda(lambda q: []), gate=knn_gate, kk=2)
