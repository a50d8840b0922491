"""LlamaIndex's own evaluators teaching the gate through ``EvaluatorFeedback``: the
embedding-based ``SemanticSimilarityEvaluator`` (the real MiniLM; its threshold sets the
verdict, so each rule is shown on purpose) and the LLM-driven ``RelevancyEvaluator``
over the embedded SmolLM2, judging real responses of an ``AdaptiveQueryEngine`` over a
real index."""

from __future__ import annotations

import pytest
from llama_index.core.evaluation import RelevancyEvaluator, SemanticSimilarityEvaluator
from llama_index.query_engine.adaptive_gates import AdaptiveQueryEngine, EvaluatorFeedback

from adaptive_gates import SKRKnnGate
from adaptive_gates.records.selfknowledge import KNOWN as KNOWN_LABEL

from .conftest import KNOWN, UNKNOWN

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Labelled unknown in the gate's memory: retrieved for, until taught otherwise.
CENSUS = UNKNOWN[0]
REFERENCE = "Tuvalu had a population of 10,679 at the 2021 census."


@pytest.fixture
def gate(core_embedder) -> SKRKnnGate:
    """A gate of its own per test (feedback changes it), k=1: a question's nearest
    stored neighbour is itself, so one lesson decides it."""
    return SKRKnnGate(core_embedder, k=1).fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))


@pytest.fixture
def engine(gate, index, llm) -> AdaptiveQueryEngine:
    return AdaptiveQueryEngine(gate, index.as_retriever(similarity_top_k=1), llm=llm)


def _similarity(embed_model, passing: bool) -> SemanticSimilarityEvaluator:
    """Every answer judged right (threshold -1) or wrong (above any cosine)."""
    return SemanticSimilarityEvaluator(embed_model=embed_model, similarity_threshold=-1.0 if passing else 1.01)


async def test_a_retrieved_answer_whose_draft_is_also_right_teaches_retrieval_was_not_needed(
    gate, engine, embed_model, llm
):
    response = await engine.aquery(CENSUS)
    assert gate.decide(CENSUS).retrieve
    judged = await EvaluatorFeedback(gate, _similarity(embed_model, True), draft_llm=llm).ateach(
        CENSUS, response, reference=REFERENCE
    )
    assert judged.answer.passing and judged.draft is not None and judged.draft.passing
    assert [(f.retrieved, f.correct, f.label) for f in judged.taught] == [
        (True, True, None),
        (False, True, KNOWN_LABEL),
    ]
    assert not gate.decide(CENSUS).retrieve  # from now on answered without retrieval


async def test_both_answers_wrong_teach_nothing_and_are_logged(gate, engine, embed_model, llm):
    response = await engine.aquery(CENSUS)
    rows = len(gate.memory_)
    judged = await EvaluatorFeedback(gate, _similarity(embed_model, False), draft_llm=llm).ateach(
        CENSUS, response, reference=REFERENCE
    )
    assert [(f.retrieved, f.correct, f.label) for f in judged.taught] == [(True, False, None), (False, False, None)]
    assert len(gate.memory_) == rows and len(gate.feedback_) == 2 and gate.decide(CENSUS).retrieve


async def test_without_a_draft_only_the_answer_is_judged(gate, engine, embed_model):
    response = await engine.aquery(CENSUS)
    judged = await EvaluatorFeedback(gate, _similarity(embed_model, True)).ateach(CENSUS, response, reference=REFERENCE)
    assert judged.draft is None and len(judged.taught) == 1 and gate.decide(CENSUS).retrieve


def test_an_llm_evaluator_judges_a_direct_answer_and_its_verdict_teaches_the_gate(gate, engine, llm):
    question = KNOWN[0]
    response = engine.query(question)
    assert not gate.decide(question).retrieve
    judged = EvaluatorFeedback(gate, RelevancyEvaluator(llm=llm)).teach(question, response)
    # the embedded model's YES/NO is the verdict, whichever it is
    (entry,) = judged.taught
    assert entry.retrieved is False and entry.correct is judged.answer.passing
    assert gate.feedback_.entries() == [entry] and judged.draft is None


def test_a_response_without_a_decision_is_refused(gate, index, embed_model):
    plain = index.as_query_engine().query(KNOWN[0])
    with pytest.raises(ValueError, match="carries no gate decision"):
        EvaluatorFeedback(gate, _similarity(embed_model, True)).teach(KNOWN[0], plain, reference="Shakespeare")
    assert len(gate.feedback_) == 0
