"""LangChain's string evaluators teaching the gate through ``EvaluatorFeedback``:
``exact_match`` (its reference sets the verdict, so each rule is shown on purpose),
``embedding_distance`` over the package's embeddings of the embedded MiniLM (a distance,
0 for an exact match, read against ``max_distance``) and the LLM-driven ``qa`` evaluator
over the embedded SmolLM2, on decisions of the real SKR-kNN gate and answers of the
embedded chat model."""

from __future__ import annotations

import pytest
from langchain_classic.evaluation import load_evaluator

from adaptive_gates import SKRKnnGate
from adaptive_gates.records.selfknowledge import KNOWN as KNOWN_LABEL
from adaptive_gates.records.selfknowledge import UNKNOWN as UNKNOWN_LABEL
from langchain_adaptive_gates import AdaptiveGatesEmbeddings, EvaluatorFeedback, GateRunnable, is_distance_evaluator

from ..conftest import KNOWN, UNKNOWN

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Labelled unknown in the gate's memory: retrieved for, until taught otherwise.
CENSUS = UNKNOWN[0]


@pytest.fixture
def gate(core_embedder) -> SKRKnnGate:
    """A gate of its own per test (feedback changes it), k=1: a question's nearest
    stored neighbour is itself, so one lesson decides it."""
    return SKRKnnGate(core_embedder, k=1).fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))


@pytest.fixture(scope="module")
def exact_match():
    return load_evaluator("exact_match", ignore_case=True)


async def test_a_retrieved_answer_whose_draft_is_also_right_teaches_retrieval_was_not_needed(
    gate, exact_match, chat_llm
):
    decision = GateRunnable(gate).invoke(CENSUS)
    assert decision.retrieve
    draft = (await chat_llm.ainvoke(CENSUS)).text  # what the model says alone; the reference here
    judged = await EvaluatorFeedback(gate, exact_match, draft_llm=chat_llm).ateach(decision, draft, reference=draft)
    assert judged.answer["score"] == 1 and judged.draft is not None and judged.draft["score"] == 1
    assert [(f.retrieved, f.correct, f.label) for f in judged.taught] == [
        (True, True, None),
        (False, True, KNOWN_LABEL),
    ]
    assert not gate.decide(CENSUS).retrieve  # from now on answered without retrieval


def test_a_right_answer_with_retrieval_and_a_wrong_draft_teach_it_was_needed(gate, exact_match, chat_llm):
    decision = gate.decide(CENSUS).to_dict()  # as a router's output carries it
    judged = EvaluatorFeedback(gate, exact_match, draft_llm=chat_llm).teach(decision, "10,679", reference="10,679")
    assert judged.draft is not None and judged.draft["score"] == 0
    assert [(f.retrieved, f.correct, f.label) for f in judged.taught] == [
        (True, True, None),
        (False, False, UNKNOWN_LABEL),
    ]
    assert gate.decide(CENSUS).retrieve


def test_without_a_draft_only_the_answer_is_judged(gate, exact_match):
    judged = EvaluatorFeedback(gate, exact_match).teach(gate.decide(CENSUS), "10,679", reference="10,679")
    assert judged.draft is None and len(judged.taught) == 1 and len(gate.feedback_) == 1


def test_an_llm_evaluator_that_gives_no_verdict_teaches_nothing(gate, chat_llm):
    """The embedded 135M model does not write qa's GRADE line, so the evaluator has no
    score: the adapter says so and the gate learns nothing."""
    qa = load_evaluator("qa", llm=chat_llm)
    decision = gate.decide(KNOWN[0])
    with pytest.raises(ValueError, match="the evaluator gave no verdict on the answer"):
        EvaluatorFeedback(gate, qa).teach(decision, "William Shakespeare", reference="Shakespeare")
    assert len(gate.feedback_) == 0


def test_what_is_not_an_evaluator_or_a_decision_is_refused(gate, exact_match):
    with pytest.raises(TypeError, match="must be a LangChain string evaluator"):
        EvaluatorFeedback(gate, object())
    with pytest.raises(ValueError, match="does not carry the question"):
        EvaluatorFeedback(gate, exact_match).teach({**gate.decide(CENSUS).to_dict(), "question": None}, "x")


@pytest.fixture(scope="module")
def embedding_distance(core_embedder):
    return load_evaluator("embedding_distance", embeddings=AdaptiveGatesEmbeddings(core_embedder))


async def test_an_embedding_distance_of_zero_is_a_right_answer_and_teaches_retrieval_was_not_needed(
    gate, embedding_distance, chat_llm
):
    """The draft equal to the reference is at distance 0 (a grade of 0 would read it as
    wrong and teach that retrieval was needed): right, so the gate stops retrieving."""
    assert is_distance_evaluator(embedding_distance)
    decision = gate.decide(CENSUS)
    assert decision.retrieve
    draft = (await chat_llm.ainvoke(CENSUS)).text
    judge = EvaluatorFeedback(gate, embedding_distance, draft_llm=chat_llm, max_distance=0.05)
    judged = await judge.ateach(decision, draft, reference=draft)
    assert judged.answer["score"] == pytest.approx(0.0, abs=1e-6) and judged.draft is not None
    assert [(f.retrieved, f.correct, f.label) for f in judged.taught] == [
        (True, True, None),
        (False, True, KNOWN_LABEL),
    ]
    assert not gate.decide(CENSUS).retrieve


def test_an_answer_far_from_the_reference_is_wrong_by_distance(gate, embedding_distance):
    decision = gate.decide(KNOWN[0])  # answered without retrieval: its answer says whether retrieval was needed
    assert not decision.retrieve
    judge = EvaluatorFeedback(gate, embedding_distance, max_distance=0.05)
    judged = judge.teach(decision, "The annual rainfall of the Sahara desert.", reference="William Shakespeare")
    assert judged.answer["score"] > 0.05
    assert [(f.retrieved, f.correct, f.label) for f in judged.taught] == [(False, False, UNKNOWN_LABEL)]
    assert gate.decide(KNOWN[0]).retrieve


def test_a_distance_evaluator_without_a_largest_right_distance_is_refused(gate, embedding_distance, exact_match):
    with pytest.raises(ValueError, match=r"scores a distance .* pass max_distance="):
        EvaluatorFeedback(gate, embedding_distance)
    with pytest.raises(ValueError, match="not both"):
        EvaluatorFeedback(gate, embedding_distance, max_distance=0.1, verdict=lambda r: True)
    with pytest.raises(ValueError, match="at least 0"):
        EvaluatorFeedback(gate, embedding_distance, max_distance=-0.1)
    assert not is_distance_evaluator(exact_match)


def test_a_string_distance_reads_an_exact_answer_as_right_and_a_far_one_as_wrong(gate):
    """LangChain's ``string_distance`` (Jaro-Winkler over rapidfuzz) is a distance too: 0
    for the reference itself, so the same answer is right and a different one wrong."""
    string_distance = load_evaluator("string_distance")
    assert is_distance_evaluator(string_distance)
    judge = EvaluatorFeedback(gate, string_distance, max_distance=0.1)
    known = gate.decide(KNOWN[0])
    assert not known.retrieve
    right = judge.teach(known, "William Shakespeare", reference="William Shakespeare")
    assert right.answer["score"] == pytest.approx(0.0, abs=1e-9)
    assert [(f.retrieved, f.correct, f.label) for f in right.taught] == [(False, True, KNOWN_LABEL)]
    assert not gate.decide(KNOWN[0]).retrieve
    wrong = judge.teach(gate.decide(KNOWN[0]), "The annual rainfall of the Sahara.", reference="William Shakespeare")
    assert wrong.answer["score"] > 0.1
    assert [(f.retrieved, f.correct, f.label) for f in wrong.taught] == [(False, False, UNKNOWN_LABEL)]
    assert gate.decide(KNOWN[0]).retrieve
