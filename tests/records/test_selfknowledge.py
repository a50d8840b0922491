"""Self-knowledge labels from outcome records: known (D+) or helped by retrieval (D-)."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.records.answer_metrics import contains_answer, exact_match
from adaptive_gates.records.data import OutcomeRecord
from adaptive_gates.records.selfknowledge import (
    KNOWN,
    LABELS,
    UNKNOWN,
    SelfKnowledge,
    agreement_records,
    label_outcomes,
    labelled_records,
    outcome_scores,
)


def _record(i, without, with_, answers=("Paris",)):
    return OutcomeRecord(str(i), f"question {i}?", list(answers), without, with_)


#: Both right, only without, only with, both wrong.
FOUR = [
    _record(0, "Paris", "Paris"),
    _record(1, "Paris", "Lyon"),
    _record(2, "Lyon", "Paris"),
    _record(3, "Lyon", "Nice"),
]


def test_outcome_scores_grade_both_answers(outcome_records):
    a, b = outcome_scores(outcome_records)
    assert a.shape == b.shape == (len(outcome_records),)
    assert a.dtype == np.float64
    expected_a = [float(contains_answer(r.pred_no_retrieval, r.answers)) for r in outcome_records]
    expected_b = [float(contains_answer(r.pred_one_retrieval, r.answers)) for r in outcome_records]
    assert a.tolist() == expected_a
    assert b.tolist() == expected_b
    em_a, _ = outcome_scores(outcome_records, "em")
    assert em_a.tolist() == [float(exact_match(r.pred_no_retrieval, r.answers)) for r in outcome_records]
    assert (em_a <= a).all()  # an exact match is contained


def test_the_paper_rule_keeps_ties_right_as_known_and_drops_both_wrong():
    knowledge = label_outcomes(FOUR)
    assert knowledge == SelfKnowledge(["0", "1", "2"], ["question 0?", "question 1?", "question 2?"], [0, 0, 1])
    assert knowledge.counts == (2, 1)


def test_the_authors_rule_drops_every_tie():
    knowledge = label_outcomes(FOUR, ties="drop")
    assert knowledge.ids == ["1", "2"]
    assert knowledge.labels == [KNOWN, UNKNOWN]


def test_labels_of_real_outcomes(outcome_records):
    a, b = outcome_scores(outcome_records)
    knowledge = label_outcomes(outcome_records)
    kept = [r for r, x, y in zip(outcome_records, a, b) if x or y]
    assert knowledge.ids == [r.id for r in kept]
    assert knowledge.questions == [r.question for r in kept]
    m, n = knowledge.counts
    assert m + n == len(kept)
    assert n == int(np.sum((a == 0) & (b == 1)))
    assert 0 < n < m  # a capable model knows most of what it gets right
    assert len(label_outcomes(outcome_records, ties="drop").ids) == int(np.sum(a != b))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="ties must be 'known' or 'drop', got 'both'"):
        label_outcomes(FOUR, ties="both")
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        label_outcomes(FOUR, metric="bleu")
    with pytest.raises(ValueError, match="labels must be one of"):
        labelled_records(FOUR, "silver")


def test_agreement_grades_against_the_answer_with_retrieval():
    agreed = agreement_records(FOUR)
    assert [r.answers for r in agreed] == [["Paris"], ["Lyon"], ["Paris"], ["Nice"]]
    assert [r.answers for r in FOUR] == [["Paris"]] * 4  # the originals untouched
    knowledge = label_outcomes(agreed)
    # helped exactly where retrieval changes the answer; no record is dropped
    assert knowledge.labels == [KNOWN, UNKNOWN, UNKNOWN, UNKNOWN]


def test_labelled_records_picks_the_grading():
    assert LABELS == ("gold", "agreement")
    assert labelled_records(FOUR, "gold") == FOUR
    assert labelled_records(FOUR, "agreement") == agreement_records(FOUR)


def test_an_empty_answer_with_retrieval_is_not_right_by_agreement():
    knowledge = label_outcomes(agreement_records([_record(0, "Paris", "")]))
    assert knowledge.ids == []
