"""LlamaIndex's own evaluators teaching the gate through ``EvaluatorFeedback``: the
embedding-based ``SemanticSimilarityEvaluator`` (the real MiniLM; its threshold sets the
verdict, so each rule is shown on purpose) and the LLM-driven ``RelevancyEvaluator``
over the embedded SmolLM2, judging real responses of an ``AdaptiveQueryEngine`` over a
real index."""

from __future__ import annotations

import pytest
from llama_index.core.evaluation import (
    BaseEvaluator,
    BatchEvalRunner,
    EvaluationResult,
    RelevancyEvaluator,
    SemanticSimilarityEvaluator,
)
from llama_index.query_engine.adaptive_gates import AdaptiveQueryEngine, EvaluatorFeedback

from adaptive_gates import FeedbackNotSupportedError, SKRKnnGate
from adaptive_gates.records.answer_metrics import contains_answer
from adaptive_gates.records.selfknowledge import KNOWN as KNOWN_LABEL
from adaptive_gates.records.selfknowledge import UNKNOWN as UNKNOWN_LABEL

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


@pytest.fixture(scope="module")
def unlearning_response(brief_index, brief_llm):
    """A real response of an engine whose gate (the popularity gate) learns nothing."""
    from adaptive_gates import PopularityGate

    gate = PopularityGate()
    engine = AdaptiveQueryEngine(gate, brief_index.as_retriever(similarity_top_k=1), llm=brief_llm)
    return gate, engine.query(KNOWN[0])


def test_teaching_a_gate_that_does_not_learn_raises_its_own_error_from_sync_code(unlearning_response, embed_model):
    gate, response = unlearning_response
    assert not gate.learns_online
    judge = EvaluatorFeedback(gate, _similarity(embed_model, True))
    with pytest.raises(FeedbackNotSupportedError, match="PopularityGate does not learn from feedback") as raised:
        judge.teach(KNOWN[0], response, reference="Shakespeare wrote Hamlet.")
    assert "nested async" not in str(raised.value)


async def test_teaching_a_gate_that_does_not_learn_raises_its_own_error_from_async_code(
    unlearning_response, embed_model
):
    gate, response = unlearning_response
    judge = EvaluatorFeedback(gate, _similarity(embed_model, True))
    with pytest.raises(FeedbackNotSupportedError, match="PopularityGate does not learn from feedback"):
        await judge.ateach(KNOWN[0], response, reference="Shakespeare wrote Hamlet.")


class ContainsReference(BaseEvaluator):
    """A real evaluator of the project's metric: an answer passes when it contains the
    reference answer (``contains_answer``, whole normalised words)."""

    def _get_prompts(self) -> dict:
        return {}

    def _update_prompts(self, prompts_dict) -> None:
        """No prompts."""

    async def aevaluate(self, query=None, response=None, contexts=None, reference=None, **kwargs) -> EvaluationResult:
        passing = bool(contains_answer(response or "", [reference]))
        return EvaluationResult(query=query, response=response, passing=passing, score=float(passing))


@pytest.fixture
def brief_engine(gate, brief_index, brief_llm) -> AdaptiveQueryEngine:
    return AdaptiveQueryEngine(gate, brief_index.as_retriever(similarity_top_k=1), llm=brief_llm)


async def test_a_batch_eval_runs_verdicts_teach_the_gate_in_one_call(gate, brief_engine, brief_llm):
    # two questions the memory holds as known (one given a reference no answer names),
    # and one it retrieves for, whose answer without retrieval is judged too
    queries = [KNOWN[1], KNOWN[0], CENSUS]
    references = ["Paris", "Christopher Marlowe", "10,679"]
    runner = BatchEvalRunner({"reference": ContainsReference()}, workers=2)
    rows = len(gate.memory_)
    with EvaluatorFeedback.recording() as decisions:
        results = await runner.aevaluate_queries(brief_engine, queries=queries, reference=references)
    assert [d.retrieve for q in queries for d in decisions[q]] == [False, False, True]
    judge = EvaluatorFeedback(gate, ContainsReference(), draft_llm=brief_llm)
    judged = await judge.ateach_batch(queries, results, decisions, reference=references)

    verdicts = [result.passing for result in results["reference"]]
    assert verdicts[1] is False  # no answer of SmolLM2's names Marlowe
    assert [j.correct for j in judged] == verdicts
    entries = gate.feedback_.entries()
    assert entries == [taught for j in judged for taught in j.taught]  # in the queries' order
    assert [(e.question, e.retrieved, e.correct) for e in entries[:2]] == [
        (KNOWN[1], False, verdicts[0]),
        (KNOWN[0], False, verdicts[1]),
    ]
    # a direct answer judged right stays direct, judged wrong retrieves from now on
    for question, verdict in zip(queries[:2], verdicts[:2]):
        assert gate.decide(question).retrieve is (not verdict)
        assert gate.feedback_.verdict(question) == (KNOWN_LABEL if verdict else UNKNOWN_LABEL)
    # the retrieved answer teaches nothing by itself; its draft, judged, does
    census = judged[2]
    assert census.decision.retrieve and census.draft is not None
    assert [(e.retrieved, e.correct) for e in census.taught] == [(True, verdicts[2]), (False, census.draft.passing)]
    labelled = [e for e in entries if e.label is not None]
    assert len(gate.memory_) == rows + len(labelled)


def test_a_batch_without_its_decisions_teaches_nothing_from_sync_code(gate, brief_engine, embed_model):
    runner = BatchEvalRunner({"similarity": _similarity(embed_model, True)})
    results = runner.evaluate_queries(brief_engine, queries=[KNOWN[1]], reference=["Paris"])  # nothing recorded
    judge = EvaluatorFeedback(gate, _similarity(embed_model, True))
    with EvaluatorFeedback.recording() as decisions:
        pass
    with pytest.raises(ValueError, match="no gate decision was recorded for query 'What is the capital of France"):
        judge.teach_batch([KNOWN[1]], results, decisions)
    with pytest.raises(ValueError, match="has 1 results for 2 queries"):
        judge.teach_batch([KNOWN[1], KNOWN[0]], results, decisions)
    assert len(gate.feedback_) == 0
