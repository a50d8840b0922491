"""Judged answers of real LlamaIndex engines teach a real SKR gate (embedded MiniLM and SmolLM2).

The query engine, the chat engine and a ``RouterQueryEngine`` with a ``GateSelector``
each answer a question directly; the verdict that the answer was wrong, recorded
through the component, makes the gate retrieve for a rewording of it. Over rounds of
answers judged against gold answers, no verdict moves a decision the wrong way.
"""

from __future__ import annotations

import pytest
from llama_index.core.base.response.schema import Response
from llama_index.core.indices import EmptyIndex
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.tools import QueryEngineTool
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
from llama_index.query_engine.adaptive_gates import ROUTE_KEY, AdaptiveChatEngine, AdaptiveQueryEngine
from llama_index.selectors.adaptive_gates import GateSelector, decision_of, response_feedback

from adaptive_gates import PopularityGate, SKRKnnGate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.gates.base.feedback import FeedbackNotSupportedError
from adaptive_gates.models.embedding.cached import CachedEmbedder
from support.feedback_checks import check_rounds_of_judged_answers  # the core suite's check of the rule

from .conftest import KNOWN, UNKNOWN

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ASKED = "Who wrote Macbeth?"
#: Nearest to "Who wrote Hamlet?" (known) before feedback, to ASKED (cosine 0.96) after.
PARAPHRASE = "Who was the author of Macbeth?"


@pytest.fixture
def gate(core_embedder) -> SKRKnnGate:
    """A fresh SKR-kNN gate (k=1): feedback changes it."""
    return SKRKnnGate(core_embedder, k=1).fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))


def _taught_by_a_wrong_direct_answer(gate, record, response) -> None:
    """``response`` answered ASKED directly; recording it as wrong must make the gate
    retrieve for PARAPHRASE, which it answered directly before."""
    assert not gate.decide(PARAPHRASE).retrieve
    decision = decision_of(response)
    assert (decision.question, decision.retrieve) == (ASKED, False)
    entry = record(response, correct=False)
    assert (entry.question, entry.retrieved, entry.correct, entry.label) == (ASKED, False, False, 1)
    after = gate.decide(PARAPHRASE)
    assert after.retrieve and after.details["neighbours"][0]["question"] == ASKED
    assert [f.question for f in gate.feedback_.entries()] == [ASKED]


def test_the_query_engine_learns_from_a_judged_response(gate, brief_index, brief_llm):
    engine = AdaptiveQueryEngine.from_index(brief_index, gate, llm=brief_llm, similarity_top_k=1)
    response = engine.query(ASKED)
    assert response.metadata[ROUTE_KEY] == "direct"
    _taught_by_a_wrong_direct_answer(gate, engine.record_feedback, response)
    assert engine.query(PARAPHRASE).metadata[ROUTE_KEY] == "retrieve"


async def test_the_selector_learns_from_a_judged_router_response(gate, brief_index, brief_llm):
    selector = GateSelector(gate)
    tools = [
        QueryEngineTool.from_defaults(
            EmptyIndex().as_query_engine(llm=brief_llm), name="llm", description="The LLM alone."
        ),
        QueryEngineTool.from_defaults(
            brief_index.as_query_engine(llm=brief_llm, similarity_top_k=1),
            name="wiki",
            description="Wikipedia paragraphs.",
        ),
    ]
    router = RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=brief_llm)
    response = await router.aquery(ASKED)
    assert response.metadata["selector_result"].ind == 0
    _taught_by_a_wrong_direct_answer(gate, selector.record_feedback, response)


def test_the_chat_engine_learns_from_a_judged_turn(gate, brief_index, brief_llm):
    engine = AdaptiveQueryEngine.from_index(brief_index, gate, llm=brief_llm, similarity_top_k=1)
    chat = AdaptiveChatEngine.from_defaults(engine, llm=brief_llm, history_window=0)
    reply = chat.chat(ASKED)
    _taught_by_a_wrong_direct_answer(gate, chat.record_feedback, reply)


def _router_query_engine(gate, brief_index, llm):
    """A ``RouterQueryEngine`` whose ``GateSelector`` picks the LLM alone or the index,
    and the selector's way of recording a verdict."""
    selector = GateSelector(gate)
    tools = [
        QueryEngineTool.from_defaults(EmptyIndex().as_query_engine(llm=llm), name="llm", description="The LLM alone."),
        QueryEngineTool.from_defaults(
            brief_index.as_query_engine(llm=llm, similarity_top_k=1), name="wiki", description="Wikipedia paragraphs."
        ),
    ]
    return RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=llm), selector.record_feedback


def _adaptive_query_engine(gate, brief_index, llm):
    engine = AdaptiveQueryEngine.from_index(brief_index, gate, llm=llm, similarity_top_k=1)
    return engine, engine.record_feedback


@pytest.fixture(scope="module")
def cached_embedder(core_embedder) -> CachedEmbedder:
    """MiniLM remembering its vectors: each test fits a fresh gate on the same questions."""
    return CachedEmbedder(core_embedder)


@pytest.mark.parametrize("pipeline", [_adaptive_query_engine, _router_query_engine], ids=["engine", "router"])
def test_verdicts_on_real_answers_never_move_a_decision_the_wrong_way(cached_embedder, brief_index, pipeline):
    """An engine over the real NQ memory answers with SmolLM2, directly or from a
    paragraph; each answer is judged against its gold answers and recorded through the
    engine, round after round: no wrong direct answer lowers a score or sends a question
    back to answering directly, and each one judged wrong ends up retrieving."""
    records = adarague_outcomes("nq")
    gate = SKRKnnGate(cached_embedder, k=3).fit_outcomes(records)
    gold = {r.question: r.answers for r in records}
    _, labels, questions = gate.memory_.entries()
    known = [q for q, label in zip(questions, labels) if label == 0]
    direct = [d.question for d in gate.decide_batch(known[:30]) if not d.retrieve][:2]
    judged = {"Who wrote the play Hamlet?": ["Shakespeare"]} | {q: gold[q] for q in direct}
    engine, record = pipeline(gate, brief_index, AdaptiveGatesLLM(max_tokens=8))  # short answers judge as well

    def ask(question):
        response = engine.query(question)
        return str(response), lambda correct: record(response, correct)

    entries = check_rounds_of_judged_answers(gate, ask, judged, probes=[ASKED, PARAPHRASE, *UNKNOWN])
    assert len(gate.feedback_) == len(entries) == 3 * len(judged)


def test_a_response_without_a_decision_is_refused(gate, brief_index, brief_llm):
    plain = brief_index.as_query_engine(llm=brief_llm, similarity_top_k=1).query(UNKNOWN[0])
    for response in (plain, Response("Shakespeare.")):
        with pytest.raises(ValueError, match="carries no gate decision"):
            response_feedback(gate, response, correct=True)
    assert len(gate.feedback_) == 0


def test_a_gate_that_does_not_learn_says_so(brief_index, brief_llm):
    engine = AdaptiveQueryEngine.from_index(brief_index, PopularityGate(), llm=brief_llm, similarity_top_k=1)
    response = engine.query(ASKED)
    with pytest.raises(FeedbackNotSupportedError, match="does not learn from feedback"):
        engine.record_feedback(response, correct=True)
