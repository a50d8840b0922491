"""Assembling a batch of decisions, as a pure function: the questions split into clean
and refused, each question's decision put back in the order the questions came."""

from __future__ import annotations

import math

import numpy as np

from adaptive_gates.errors import BackendError
from adaptive_gates.gates.base.assessment import Assessment, Verdict
from adaptive_gates.gates.base.batch import Batch, assemble_decisions, open_batch

ASKED = ["Who wrote Hamlet?", "   ", "Population of Tuvalu in 2021?", None, "What is the capital of France?"]


def _above(scores, threshold, evidence, taken):
    """The plain rule: retrieve above the threshold, or as a stage already decided."""
    flags = [t.retrieve if t is not None else s > threshold for s, t in zip(scores, taken)]
    used = [t.threshold if t is not None else threshold for t in taken]
    return np.array(flags), np.array(used)


def _assemble(batch: Batch, scored, **options):
    return assemble_decisions(
        batch, scored, **{"gate": "test", "fallback_retrieve": True, "verdicts": _above, "latency_ms": 2.0, **options}
    )


def test_open_batch_splits_clean_questions_from_refused_ones_by_position():
    batch = open_batch(ASKED, 0.5, 10.0)
    assert batch.questions == ASKED and batch.threshold == 0.5 and batch.start == 10.0
    assert batch.clean == {0: ASKED[0], 2: ASKED[2], 4: ASKED[4]}
    assert batch.to_score == [ASKED[0], ASKED[2], ASKED[4]]
    assert set(batch.problems) == {1, 3} and all(p.startswith("invalid question: ") for p in batch.problems.values())


def test_decisions_come_back_in_the_order_asked_with_the_refused_ones_as_fallbacks():
    batch = open_batch(ASKED, 0.5, 0.0)
    scored = Assessment(
        np.array([0.1, 0.9, 0.4]),
        [{"n": 0}, {"n": 2}, {"n": 4}],
        drafts=["Shakespeare", None, "Paris"],
        llm_calls=[1.0, 1.0, 1.0],
    )
    decisions = _assemble(batch, scored)
    assert [d.question for d in decisions] == [ASKED[0], "   ", ASKED[2], None, ASKED[4]]  # a str kept as asked
    assert [d.retrieve for d in decisions] == [False, True, True, True, False]
    assert [d.is_fallback for d in decisions] == [False, True, False, True, False]
    assert [d.score for d in decisions if not d.is_fallback] == [0.1, 0.9, 0.4]
    assert [d.details for d in decisions] == [{"n": 0}, {}, {"n": 2}, {}, {"n": 4}]
    assert decisions[0].draft_answer == "Shakespeare" and decisions[4].draft_answer == "Paris"
    assert decisions[2].draft_answer is None and decisions[2].answer_without_retrieval is None
    assert all(d.gate == "test" and d.latency_ms == 2.0 and d.threshold == 0.5 for d in decisions)
    assert math.isnan(decisions[1].score) and decisions[1].error.startswith("invalid question: ")


def test_an_unjudged_question_keeps_what_the_gate_found_and_a_stage_verdict_keeps_its_threshold():
    batch = open_batch(["a?", "b?", "c?"], 0.5, 0.0)
    scored = Assessment(
        np.array([0.9, math.nan, 0.1]),
        [{"k": "a"}, {"k": "b"}, {"k": "c"}],
        drafts=["A", "B", "C"],
        fallbacks=["the reply holds no answer", None, None],
        verdicts=[None, None, Verdict(retrieve=True, threshold=0.05)],
    )
    first, second, third = _assemble(batch, scored)
    assert first.is_fallback and first.error == "the reply holds no answer" and first.details == {"k": "a"}
    assert first.answer_without_retrieval == "A" and first.draft_answer is None
    assert second.is_fallback and second.error == "backend error: non-finite score"
    assert third.retrieve is True and third.threshold == 0.05 and third.score == 0.1


def test_a_scoring_exception_makes_every_clean_question_a_backend_fallback():
    batch = open_batch(["a?", "", "c?"], 0.5, 0.0)
    decisions = _assemble(batch, BackendError("the server is down"), fallback_retrieve=False)
    assert [d.error for d in decisions] == [
        "backend error: BackendError: the server is down",
        batch.problems[1],
        "backend error: BackendError: the server is down",
    ]
    assert [d.retrieve for d in decisions] == [False] * 3


def test_a_batch_with_nothing_to_score_is_all_fallbacks_and_an_empty_one_is_empty():
    refused = open_batch(["", None], 0.5, 0.0)
    assert [d.is_fallback for d in _assemble(refused, None)] == [True, True]
    assert _assemble(open_batch([], 0.5, 0.0), None) == []


def test_assembling_is_pure():
    batch = open_batch(ASKED, 0.5, 0.0)
    scored = Assessment(np.array([0.1, 0.9, 0.4]), [{}, {}, {}])
    before = (dict(batch.clean), dict(batch.problems))
    assert [d.to_dict() for d in _assemble(batch, scored)] == [d.to_dict() for d in _assemble(batch, scored)]
    assert (batch.clean, batch.problems) == before
