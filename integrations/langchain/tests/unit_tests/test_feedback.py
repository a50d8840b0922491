"""GateFeedback: judged answers of real LangChain runs teach a real SKR gate (embedded
MiniLM; in the rule's test, answers of the embedded SmolLM2 judged against gold answers)."""

import asyncio
import uuid

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableLambda

from adaptive_gates import PopularityGate, SKRKnnGate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.gates.base.feedback import FeedbackNotSupportedError
from langchain_adaptive_gates import AdaptiveGatesChatModel, GatedRetriever, GateFeedback, gated_router
from support.feedback_checks import check_rounds_of_judged_answers  # the core suite's check of the rule

KNOWN = ["Who wrote Hamlet?", "What is the capital of France?", "Who painted the Mona Lisa?"]
UNKNOWN = ["What was the population of Tuvalu in the 2021 census?", "What did the report published yesterday conclude?"]
ASKED = "Who wrote Macbeth?"
#: Nearest to "Who wrote Hamlet?" (known) before feedback, to ASKED (cosine 0.96) after.
PARAPHRASE = "Who was the author of Macbeth?"


@pytest.fixture
def gate(core_embedder):
    """A fresh SKR-kNN gate (k=1): feedback changes it."""
    return SKRKnnGate(core_embedder, k=1).fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))


def _router(gate):
    return gated_router(
        gate, direct=RunnableLambda(lambda q: f"direct: {q}"), retrieval=RunnableLambda(lambda q: f"rag: {q}")
    )


def _call(feedback, run_id=None):
    return {"callbacks": [feedback], "run_id": run_id or uuid.uuid4()}


def test_a_judged_answer_changes_how_a_similar_question_is_routed(gate):
    router, feedback = _router(gate), GateFeedback(gate)
    assert router.invoke(PARAPHRASE) == f"direct: {PARAPHRASE}"
    config = _call(feedback)
    assert router.invoke(ASKED, config) == f"direct: {ASKED}"
    held = feedback.decision(config["run_id"])
    assert (held.question, held.retrieve, held.gate) == (ASKED, False, "skr-knn")

    entry = feedback.record(config["run_id"], correct=False)  # answered alone, and wrongly

    assert (entry.question, entry.retrieved, entry.correct, entry.label) == (ASKED, False, False, 1)
    assert router.invoke(PARAPHRASE) == f"rag: {PARAPHRASE}"
    assert [f.question for f in gate.feedback_.entries()] == [ASKED]
    assert feedback.decision(config["run_id"]) is None
    with pytest.raises(KeyError, match="record each call once"):
        feedback.record(config["run_id"], correct=False)


def test_batch_and_async_calls_are_told_apart_by_their_run_ids(gate):
    router, feedback = _router(gate), GateFeedback(gate)
    configs = [_call(feedback), _call(feedback)]
    router.batch([ASKED, UNKNOWN[0]], configs)
    held = [feedback.decision(c["run_id"]) for c in configs]
    assert [(d.question, d.retrieve) for d in held] == [(ASKED, False), (UNKNOWN[0], True)]

    async_config = _call(feedback)
    asyncio.run(router.ainvoke(PARAPHRASE, async_config))
    assert feedback.decision(async_config["run_id"]).question == PARAPHRASE
    feedback.record(async_config["run_id"], correct=True)  # known, and right: the memory learns it as known
    assert gate.feedback_.entries()[-1].label == 0


def test_a_decision_deep_in_a_chain_belongs_to_the_outer_call(gate, passage_store):
    feedback = GateFeedback(gate)
    routed = RunnableLambda(str.strip) | _router(gate) | RunnableLambda(str.upper)
    config = _call(feedback)
    assert routed.invoke(f"  {ASKED} ", config) == f"DIRECT: {ASKED}".upper()
    assert feedback.decision(config["run_id"]).question == ASKED

    retriever = GatedRetriever(retriever=passage_store("in-memory").as_retriever(search_kwargs={"k": 1}), gate=gate)
    rag = retriever | RunnableLambda(lambda docs: len(docs))
    config = _call(feedback)
    assert rag.invoke(UNKNOWN[1], config) == 1
    held = feedback.decision(config["run_id"])
    assert (held.question, held.retrieve) == (UNKNOWN[1], True)


@pytest.mark.usefixtures("one_torch_thread")
def test_verdicts_on_real_answers_never_move_a_decision_the_wrong_way(core_embedder, labelled_questions, passage_store):
    """A router over the real NQ memory answers directly with SmolLM2 or from retrieved
    passages; each answer is judged against its gold answers and recorded through
    GateFeedback, round after round: no wrong direct answer lowers a score or sends a
    question back to answering directly, and each one judged wrong ends up retrieving."""
    gate = SKRKnnGate(core_embedder, k=3).fit(*labelled_questions)
    gold = {r.question: r.answers for r in adarague_outcomes("nq")}
    known = [q for q, label in zip(*labelled_questions) if label == 0]
    direct = [d.question for d in gate.decide_batch(known[:30]) if not d.retrieve][:2]
    judged = {"Who wrote the play Hamlet?": ["Shakespeare"]} | {q: gold[q] for q in direct}
    passages = passage_store("in-memory").as_retriever(search_kwargs={"k": 1})
    router = gated_router(
        gate,
        direct=AdaptiveGatesChatModel(max_tokens=8) | StrOutputParser(),
        retrieval=passages | RunnableLambda(lambda docs: docs[0].page_content),
    )
    feedback = GateFeedback(gate)

    def ask(question):
        config = _call(feedback)
        answer = router.invoke(question, config)
        return answer, lambda correct: feedback.record(config["run_id"], correct=correct)

    entries = check_rounds_of_judged_answers(gate, ask, judged, probes=[ASKED, PARAPHRASE, *UNKNOWN])
    assert len(gate.feedback_) == len(entries) == 3 * len(judged)


def test_a_gate_that_does_not_learn_keeps_the_decision_for_another_try():
    gate = PopularityGate()
    feedback = GateFeedback(gate)
    config = _call(feedback)
    _router(gate).invoke(ASKED, config)
    with pytest.raises(FeedbackNotSupportedError, match="does not learn from feedback"):
        feedback.record(config["run_id"], correct=True)
    assert feedback.decision(config["run_id"]).question == ASKED


def test_only_the_latest_calls_are_held(gate):
    router, feedback = _router(gate), GateFeedback(gate, max_runs=1)
    first, second = _call(feedback), _call(feedback)
    router.invoke(ASKED, first)
    router.invoke(PARAPHRASE, second)
    assert feedback.decision(first["run_id"]) is None
    assert feedback.decision(second["run_id"]).question == PARAPHRASE
    with pytest.raises(KeyError, match="no gate decision is held"):
        feedback.record(first["run_id"], correct=True)


def test_bad_arguments_are_refused(gate):
    with pytest.raises(TypeError, match="adaptive_gates Gate"):
        GateFeedback(object())
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="max_runs"):
            GateFeedback(gate, max_runs=bad)
    feedback = GateFeedback(gate)
    config = _call(feedback)
    _router(gate).invoke(ASKED, config)
    with pytest.raises(TypeError, match="correct must be a bool"):
        feedback.record(config["run_id"], correct="yes")
    assert feedback.decision(config["run_id"]) is not None  # a refused verdict teaches nothing and keeps it
    assert len(gate.feedback_) == 0
