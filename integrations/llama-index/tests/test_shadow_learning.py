"""Shadow learning through the adaptive query engine: a draft-check gate (fitted on the
bundled HotpotQA outcomes, drafting with the embedded SmolLM2, checking its drafts
against a real keyword-table retriever) learns from the queries a real
``AdaptiveQueryEngine`` answers. A retrieving decision gives its pair (the draft, the
engine's synthesised answer over the passages); a draft returned to the user is, at
rate 1, also answered over its passages by the engine's own postprocessors and response
synthesizer after the user has the draft; a shadow that fails is logged and the user's
response is the same. The context chat engine and the adaptive-RAG workflow learn the
same way, each answering its shadows by its own path."""

from __future__ import annotations

import asyncio
import copy
import logging
import threading

import numpy as np
import pytest
from llama_index.core import SimpleKeywordTableIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.response_synthesizers import get_response_synthesizer
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
from llama_index.query_engine.adaptive_gates import ROUTE_KEY, AdaptiveContextChatEngine, AdaptiveQueryEngine
from llama_index.retrievers.adaptive_gates import LlamaIndexRetriever
from llama_index.selectors.adaptive_gates import decision_of
from llama_index.selectors.adaptive_gates.passages import hit_nodes
from llama_index.workflows.adaptive_gates import AdaptiveRAGWorkflow
from pydantic import PrivateAttr

from adaptive_gates import DraftCheckGate
from adaptive_gates.answering.answerer import clean_answer
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.extend import ShadowLearner
from adaptive_gates.models import LocalChatModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Records the gate is fitted on; the question asked comes after them.
TRAIN = 80
#: New tokens of each draft and answer: the tests follow the pairs, not the words.
TOKENS = 4
#: Seconds the background work may take before the test calls it lost (a bound, not a measure).
PATIENCE = 300.0


class Held(BaseNodePostprocessor):
    """A postprocessor that keeps the nodes it is given, after waiting to be released
    (or failing, ``fail``); on a draft's route only a shadow answer reaches it."""

    fail: bool = False
    _released: threading.Event = PrivateAttr(default_factory=threading.Event)
    _seen: list[list[str]] = PrivateAttr(default_factory=list)

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None):
        self._seen.append([n.node.get_content() for n in nodes])
        assert self._released.wait(PATIENCE)
        if self.fail:
            raise ConnectionError("the reranking service is gone")
        return nodes


@pytest.fixture(scope="module")
def records():
    return adarague_outcomes("hotpotqa")[: TRAIN + 1]


@pytest.fixture(scope="module")
def keywords(records) -> BaseRetriever:
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    nodes = [TextNode(id_=f"h{i}", text=text, metadata={"title": title}) for i, (title, text) in enumerate(unique)]
    return SimpleKeywordTableIndex(nodes).as_retriever(retriever_mode="simple", num_chunks_per_query=3)


@pytest.fixture(scope="module")
def fitted(records, keywords, core_embedder) -> DraftCheckGate:
    gate = DraftCheckGate(
        LocalChatModel(), LlamaIndexRetriever(keywords), core_embedder, embedding_dims=8, max_tokens=TOKENS
    )
    return gate.fit_outcomes(records[:TRAIN])


def _at_rate(gate: DraftCheckGate, rate: float) -> DraftCheckGate:
    """The fitted gate with a threshold every need score is above (``rate`` 1) or none
    is (``rate`` 0), and a log of its own."""
    forced = copy.copy(gate).calibrate_scores(np.linspace(0.0, 1.0, 21), target_rate=rate)
    forced.forget_observations()
    return forced


@pytest.fixture
def retrieving(fitted) -> DraftCheckGate:
    return _at_rate(fitted, 1.0)


@pytest.fixture
def drafting(fitted) -> DraftCheckGate:
    return _at_rate(fitted, 0.0)


@pytest.fixture(scope="module")
def question(records) -> str:
    return records[TRAIN].question


@pytest.fixture(scope="module")
def answerer() -> AdaptiveGatesLLM:
    return AdaptiveGatesLLM(max_tokens=TOKENS)


def test_a_draft_is_returned_before_its_shadow_answer_which_the_gate_learns_from(
    drafting, keywords, answerer, question
):
    held = Held()
    learner = ShadowLearner(drafting, rate=1.0, refit_every=2)
    engine = AdaptiveQueryEngine(drafting, keywords, llm=answerer, node_postprocessors=[held], shadow_learner=learner)

    response = engine.query(question)
    decision = decision_of(response)
    # the user has the draft while its shadow is still held: nothing waited for it
    assert response.metadata[ROUTE_KEY] == "draft" and response.response == decision.draft_answer != ""
    assert len(drafting.shadow_) == 0
    held._released.set()
    assert learner.drain(PATIENCE)

    [shadow] = drafting.shadow_.entries()
    assert (shadow.source, shadow.probability, shadow.draft) == ("shadow", 1.0, decision.draft_answer)
    assert held._seen == [[h.text for h in decision.passages]]  # the engine's own path over the gate's passages
    expected = get_response_synthesizer(llm=answerer).synthesize(question, nodes=hit_nodes(decision.passages))
    assert shadow.answer == clean_answer(expected.response)  # greedy: the shadow is this answer
    assert learner.counts["shadows_asked"] == learner.counts["extra_llm_calls"] == 1

    # the async path: the same response, the shadow recorded after it, and the second pair refits the gate
    again = asyncio.run(engine.aquery(question))
    assert again.response == response.response
    assert learner.drain(PATIENCE)
    assert [e.source for e in drafting.shadow_.entries()] == ["shadow", "shadow"]
    assert learner.counts["refits"] == drafting.shadow_.refits == 1 and drafting.combiner_.target == "helps"


def test_a_retrieved_response_is_the_pair_with_no_extra_call(retrieving, keywords, answerer, question):
    learner = ShadowLearner(retrieving, rate=1.0, refit_every=50)
    engine = AdaptiveQueryEngine(retrieving, keywords, llm=answerer, shadow_learner=learner)

    response = engine.query(question)
    assert response.metadata[ROUTE_KEY] == "retrieve"
    assert learner.drain(PATIENCE)
    [pair] = retrieving.shadow_.entries()
    assert (pair.source, pair.probability) == ("retrieved", 1.0)
    assert pair.draft == decision_of(response).answer_without_retrieval
    assert pair.answer == clean_answer(response.response)
    assert learner.counts["extra_llm_calls"] == learner.counts["refits"] == 0


def test_a_failing_shadow_is_logged_and_the_user_keeps_the_response(drafting, keywords, answerer, question, caplog):
    held = Held(fail=True)
    learner = ShadowLearner(drafting, rate=1.0, refit_every=1)
    engine = AdaptiveQueryEngine(drafting, keywords, llm=answerer, node_postprocessors=[held], shadow_learner=learner)
    plain = AdaptiveQueryEngine(drafting, keywords, llm=answerer).query(question)

    with caplog.at_level(logging.WARNING, logger="adaptive_gates.gates.shadow.learner"):
        response = engine.query(question)
        held._released.set()
        assert learner.drain(PATIENCE)
    assert response.response == plain.response == decision_of(response).draft_answer  # the draft, as without shadows
    assert response.metadata[ROUTE_KEY] == plain.metadata[ROUTE_KEY] == "draft"
    assert learner.counts["shadow_failures"] == 1 and learner.counts["shadow_pairs"] == 0
    assert len(drafting.shadow_) == 0 and drafting.shadow_.refits == 0
    assert any("shadow answer" in r.getMessage() and "ConnectionError" in r.getMessage() for r in caplog.records)


def test_the_rate_option_records_the_retrieved_pairs_and_only_a_learning_gate_takes_it(
    retrieving, knn_gate, keywords, answerer, question
):
    engine = AdaptiveQueryEngine(retrieving, keywords, llm=answerer, shadow_rate=0.0, shadow_refit_every=5)
    assert engine.shadow_learner is not None and engine.shadow_learner.rate == 0.0
    engine.query(question)
    assert engine.shadow_learner.drain(PATIENCE)
    assert [e.source for e in retrieving.shadow_.entries()] == ["retrieved"]

    AdaptiveQueryEngine(retrieving, keywords, llm=answerer).query(question)
    assert len(retrieving.shadow_) == 1  # without the option nothing is recorded
    with pytest.raises(ValueError, match="draft-check"):
        AdaptiveQueryEngine(knn_gate, keywords, llm=answerer, shadow_rate=0.2)


# ---------------------------------------------------------------------- the context chat engine
def test_the_chat_engine_replies_with_the_draft_and_learns_from_its_shadow_after(
    drafting, keywords, answerer, question
):
    held = Held()
    learner = ShadowLearner(drafting, rate=1.0, refit_every=50)
    chat = AdaptiveContextChatEngine.from_defaults(
        drafting, keywords, llm=answerer, node_postprocessors=[held], shadow_learner=learner
    )
    plain = AdaptiveContextChatEngine.from_defaults(drafting, keywords, llm=answerer).chat(question)

    reply = chat.chat(question)
    decision = decision_of(reply)
    # the user has the draft while its shadow is still held, and it is the reply without shadows
    assert reply.metadata[ROUTE_KEY] == plain.metadata[ROUTE_KEY] == "draft"
    assert reply.response == plain.response == decision.draft_answer != ""
    assert len(drafting.shadow_) == 0
    held._released.set()
    assert learner.drain(PATIENCE)

    [shadow] = drafting.shadow_.entries()
    assert (shadow.source, shadow.probability, shadow.draft) == ("shadow", 1.0, decision.draft_answer)
    assert held._seen == [[h.text for h in decision.passages]]
    expected = chat._get_response_synthesizer([]).synthesize(question, hit_nodes(decision.passages))
    assert shadow.answer == clean_answer(expected.response)  # the context path over the gate's passages
    assert [m.content for m in chat.chat_history] == [question, reply.response]  # the shadow is not in memory


def test_the_chat_engine_records_a_retrieved_reply_and_only_with_the_option(retrieving, keywords, answerer, question):
    chat = AdaptiveContextChatEngine.from_defaults(retrieving, keywords, llm=answerer, shadow_rate=0.0)
    reply = chat.chat(question)
    assert reply.metadata[ROUTE_KEY] == "retrieve"
    assert chat.shadow_learner is not None and chat.shadow_learner.drain(PATIENCE)
    [pair] = retrieving.shadow_.entries()
    assert (pair.source, pair.probability) == ("retrieved", 1.0)
    assert pair.answer == clean_answer(reply.response)
    assert chat.shadow_learner.counts["extra_llm_calls"] == 0

    # a streamed reply's text is the caller's: its pair is not recorded
    streamed = chat.stream_chat(question)
    assert chat.shadow_learner.drain(PATIENCE)
    assert streamed.response_gen is not None and "".join(streamed.response_gen) != ""
    assert len(retrieving.shadow_) == 1

    AdaptiveContextChatEngine.from_defaults(retrieving, keywords, llm=answerer).chat(question)
    assert len(retrieving.shadow_) == 1  # without the option nothing is recorded


def test_a_failing_chat_shadow_is_logged_and_the_reply_kept(drafting, keywords, answerer, question, caplog):
    held = Held(fail=True)
    held._released.set()
    learner = ShadowLearner(drafting, rate=1.0, refit_every=1)
    chat = AdaptiveContextChatEngine.from_defaults(
        drafting, keywords, llm=answerer, node_postprocessors=[held], shadow_learner=learner
    )
    with caplog.at_level(logging.WARNING, logger="adaptive_gates.gates.shadow.learner"):
        reply = chat.chat(question)
        assert learner.drain(PATIENCE)
    assert reply.response == decision_of(reply).draft_answer and reply.metadata[ROUTE_KEY] == "draft"
    assert learner.counts["shadow_failures"] == 1 and len(drafting.shadow_) == 0
    assert any("shadow answer" in r.getMessage() and "ConnectionError" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------- the adaptive-RAG workflow
def _answer(workflow: AdaptiveRAGWorkflow, question: str):
    """The workflow's result for ``question``, run on a loop of its own."""

    async def run():
        return await workflow.run(query=question)

    return asyncio.run(run())


def test_the_workflow_returns_the_draft_and_learns_from_its_shadow(drafting, keywords, answerer, question):
    learner = ShadowLearner(drafting, rate=1.0, refit_every=50)
    workflow = AdaptiveRAGWorkflow(drafting, keywords, llm=answerer, shadow_learner=learner, timeout=PATIENCE)
    plain = _answer(AdaptiveRAGWorkflow(drafting, keywords, llm=answerer, timeout=PATIENCE), question)

    response = _answer(workflow, question)
    decision = decision_of(response)
    assert response.metadata[ROUTE_KEY] == plain.metadata[ROUTE_KEY] == "draft"
    assert response.response == plain.response == decision.draft_answer != ""
    assert workflow.shadow_learner is learner and learner.drain(PATIENCE)

    [shadow] = drafting.shadow_.entries()
    assert (shadow.source, shadow.probability, shadow.draft) == ("shadow", 1.0, decision.draft_answer)
    expected = get_response_synthesizer(llm=answerer).synthesize(question, nodes=hit_nodes(decision.passages))
    assert shadow.answer == clean_answer(expected.response)


def test_the_workflow_records_a_retrieved_answer_and_only_with_the_option(retrieving, keywords, answerer, question):
    workflow = AdaptiveRAGWorkflow(retrieving, keywords, llm=answerer, shadow_rate=0.0, timeout=PATIENCE)
    response = _answer(workflow, question)
    assert response.metadata[ROUTE_KEY] == "retrieve"
    assert workflow.shadow_learner is not None and workflow.shadow_learner.drain(PATIENCE)
    [pair] = retrieving.shadow_.entries()
    assert (pair.source, pair.probability) == ("retrieved", 1.0)
    assert pair.draft == decision_of(response).answer_without_retrieval
    assert pair.answer == clean_answer(response.response)

    _answer(AdaptiveRAGWorkflow(retrieving, keywords, llm=answerer, timeout=PATIENCE), question)
    assert len(retrieving.shadow_) == 1  # without the option nothing is recorded


def test_a_failing_workflow_shadow_is_logged_and_the_answer_kept(
    drafting, keywords, answerer, question, caplog, monkeypatch
):
    learner = ShadowLearner(drafting, rate=1.0, refit_every=1)
    workflow = AdaptiveRAGWorkflow(drafting, keywords, llm=answerer, shadow_learner=learner, timeout=PATIENCE)

    def gone(*args, **kwargs):
        raise ConnectionError("the LLM service is gone")

    monkeypatch.setattr(workflow.response_synthesizer, "synthesize", gone)
    with caplog.at_level(logging.WARNING, logger="adaptive_gates.gates.shadow.learner"):
        response = _answer(workflow, question)
        assert learner.drain(PATIENCE)
    assert response.response == decision_of(response).draft_answer and response.metadata[ROUTE_KEY] == "draft"
    assert learner.counts["shadow_failures"] == 1 and len(drafting.shadow_) == 0
    assert any("shadow answer" in r.getMessage() and "ConnectionError" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="not both"):
        AdaptiveRAGWorkflow(drafting, keywords, llm=answerer, shadow_rate=0.2, shadow_learner=learner)
