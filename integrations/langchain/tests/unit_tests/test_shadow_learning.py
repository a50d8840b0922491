"""Shadow learning through the adaptive-RAG graph: a draft-check gate (fitted on the
bundled HotpotQA outcomes, drafting with the embedded SmolLM2, checking its drafts
against a real TF-IDF retriever) learns from the questions a real compiled LangGraph
graph answers. A retrieving decision gives its pair (the draft, the graph's answer over
the passages); a draft answered to the user is, at rate 1, also answered over its
passages by the graph's own answer chain after the user has the draft; a shadow that
fails is logged and the user's answer is the same."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from langchain_community.retrievers import TFIDFRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda

from adaptive_gates import DraftCheckGate, GateDecision
from adaptive_gates.answering.answerer import clean_answer
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.extend import ShadowLearner
from langchain_adaptive_gates import (
    AdaptiveGatesChatModel,
    LangChainChatModel,
    LangChainRetriever,
    create_adaptive_rag_graph,
    hit_documents,
)
from langchain_adaptive_gates.adaptive_rag import SHADOW_TAG

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Records the gate is fitted on; the question asked comes after them.
TRAIN = 80
#: New tokens of each draft and answer: the tests follow the pairs, not the words.
TOKENS = 4
#: Per-request thresholds that force the scored decision to retrieve, or to serve its draft.
RETRIEVE = {"configurable": {"gate_threshold": -1.0}}
DRAFT = {"configurable": {"gate_threshold": 2.0}}
#: Seconds the background work may take before the test calls it lost (a bound, not a measure).
PATIENCE = 300.0


@pytest.fixture(scope="module")
def records():
    return adarague_outcomes("hotpotqa")[: TRAIN + 1]


@pytest.fixture(scope="module")
def tfidf(records) -> TFIDFRetriever:
    """TF-IDF over the questions' own Wikipedia paragraphs (each record carries ten)."""
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    return TFIDFRetriever.from_texts([t for _, t in unique], metadatas=[{"title": t} for t, _ in unique], k=3)


@pytest.fixture(scope="module")
def fitted(records, tfidf, core_embedder) -> DraftCheckGate:
    chat = LangChainChatModel(AdaptiveGatesChatModel(max_tokens=TOKENS))
    gate = DraftCheckGate(chat, LangChainRetriever(tfidf), core_embedder, embedding_dims=8, max_tokens=TOKENS)
    return gate.fit_outcomes(records[:TRAIN])


@pytest.fixture
def gate(fitted) -> DraftCheckGate:
    """The fitted gate, back to the combiner its fit made after each test."""
    yield fitted
    fitted.forget_observations()


@pytest.fixture(scope="module")
def question(records) -> str:
    return records[TRAIN].question


@pytest.fixture(scope="module")
def answerer() -> AdaptiveGatesChatModel:
    return AdaptiveGatesChatModel(max_tokens=TOKENS)


class ShadowHeld:
    """The graph's LLM: the real answerer, whose shadow answers (runs tagged
    ``SHADOW_TAG``) wait until released, or fail (``fail``). The prompts of each kind
    are kept."""

    def __init__(self, answerer: AdaptiveGatesChatModel, *, fail: bool = False) -> None:
        self.answerer = answerer
        self.fail = fail
        self.released = threading.Event()
        self.served: list = []
        self.shadows: list = []  # the prompt values, to ask them again
        self.runnable = RunnableLambda(self._answer, name="held_llm")

    def _answer(self, prompt, config: RunnableConfig):
        if SHADOW_TAG not in config.get("tags", []):
            self.served.append(prompt)
            return self.answerer.invoke(prompt, config)
        self.shadows.append(prompt)
        assert self.released.wait(PATIENCE)
        if self.fail:
            raise ConnectionError("the upstream is gone")
        return self.answerer.invoke(prompt, config)


def _context(decision: dict) -> str:
    """The passages the decision checked, as the graph's prompt joins them."""
    return "\n\n".join(d.page_content for d in hit_documents(GateDecision.from_dict(decision).passages))


def test_a_draft_is_returned_before_its_shadow_answer_which_the_gate_learns_from(gate, tfidf, answerer, question):
    llm = ShadowHeld(answerer)
    learner = ShadowLearner(gate, rate=1.0, refit_every=1)
    app = create_adaptive_rag_graph(gate, tfidf, llm.runnable, shadow_learner=learner)

    state = app.invoke({"question": question}, DRAFT)
    decision = state["gate_decision"]
    # the user has the draft while the shadow answer is still held: nothing waited for it
    assert state["answer"] == decision["draft_answer"] != "" and state["documents"] == []
    assert llm.served == [] and len(gate.shadow_) == 0
    llm.released.set()
    assert learner.drain(PATIENCE)

    [shadow] = gate.shadow_.entries()
    assert (shadow.source, shadow.probability, shadow.draft) == ("shadow", 1.0, decision["draft_answer"])
    [prompt] = llm.shadows
    assert f"Context:\n{_context(decision)}\n" in prompt.to_string()  # the graph's prompt over the gate's passages
    expected = answerer.invoke(prompt)  # greedy: the shadow is this answer
    assert shadow.answer == clean_answer(expected.text)
    assert learner.counts["shadows_asked"] == learner.counts["extra_llm_calls"] == 1
    assert learner.counts["refits"] == gate.shadow_.refits == 1 and gate.combiner_.target == "helps"

    # the async path: the same answer, the shadow recorded after it
    again = asyncio.run(app.ainvoke({"question": question}, DRAFT))
    assert again["answer"] == state["answer"]
    assert learner.drain(PATIENCE)
    assert [e.source for e in gate.shadow_.entries()] == ["shadow", "shadow"] and learner.counts["shadow_pairs"] == 2


def test_a_retrieved_answer_is_the_pair_with_no_extra_call(gate, tfidf, answerer, question):
    llm = ShadowHeld(answerer)
    learner = ShadowLearner(gate, rate=1.0, refit_every=50)
    app = create_adaptive_rag_graph(gate, tfidf, llm.runnable, shadow_learner=learner)

    state = app.invoke({"question": question}, RETRIEVE)
    assert learner.drain(PATIENCE)
    [pair] = gate.shadow_.entries()
    assert (pair.source, pair.probability) == ("retrieved", 1.0)
    assert pair.draft == state["gate_decision"]["answer_without_retrieval"]
    assert pair.answer == clean_answer(state["answer"])
    assert len(llm.served) == 1 and llm.shadows == [] and learner.counts["extra_llm_calls"] == 0
    assert learner.counts["refits"] == 0  # one pair of fifty


def test_a_failing_shadow_is_logged_and_the_user_keeps_the_answer(gate, tfidf, answerer, question, caplog):
    llm = ShadowHeld(answerer, fail=True)
    learner = ShadowLearner(gate, rate=1.0, refit_every=1)
    app = create_adaptive_rag_graph(gate, tfidf, llm.runnable, shadow_learner=learner)
    plain = create_adaptive_rag_graph(gate, tfidf, answerer).invoke({"question": question}, DRAFT)

    with caplog.at_level(logging.WARNING, logger="adaptive_gates.gates.shadow.learner"):
        state = app.invoke({"question": question}, DRAFT)
        llm.released.set()
        assert learner.drain(PATIENCE)
    assert state["answer"] == plain["answer"] and state["gate_decision"]["draft_answer"] == plain["answer"]
    assert learner.counts["shadow_failures"] == 1 and learner.counts["shadow_pairs"] == 0
    assert len(gate.shadow_) == 0 and gate.shadow_.refits == 0
    assert any("shadow answer" in r.getMessage() and "ConnectionError" in r.getMessage() for r in caplog.records)


def test_the_rate_option_records_the_retrieved_pairs_and_only_a_learning_gate_takes_it(
    gate, knn_gate, tfidf, answerer, question
):
    app = create_adaptive_rag_graph(gate, tfidf, answerer, shadow_rate=0.0, shadow_refit_every=5)
    app.invoke({"question": question}, DRAFT)  # rate 0: no shadow
    app.invoke({"question": question}, RETRIEVE)
    deadline = time.monotonic() + PATIENCE
    while not len(gate.shadow_) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [e.source for e in gate.shadow_.entries()] == ["retrieved"]

    create_adaptive_rag_graph(gate, tfidf, answerer).invoke({"question": question}, RETRIEVE)
    assert len(gate.shadow_) == 1  # without the option nothing is recorded
    with pytest.raises(ValueError, match="draft-check"):
        create_adaptive_rag_graph(knn_gate, tfidf, answerer, shadow_rate=0.2)
    with pytest.raises(ValueError, match="not both"):
        create_adaptive_rag_graph(gate, tfidf, answerer, shadow_rate=0.2, shadow_learner=ShadowLearner(gate))
