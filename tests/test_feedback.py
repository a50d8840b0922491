"""Feedback: the label rule, later decisions on similar questions changed by it (real
MiniLM, real outcome records, hand-written paraphrases), the log saved with the gate,
and gates that cannot learn saying so."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from adaptive_gates import (
    BudgetedGate,
    FeedbackLog,
    FeedbackNotSupportedError,
    GateDecision,
    GateLoadError,
    SKRClassifierGate,
    SKRKnnGate,
    VerbalizedGate,
    load_gate,
)
from adaptive_gates.feedback import FEEDBACK_FILE, feedback_label
from adaptive_gates.models.cached_embedder import CachedEmbedder
from adaptive_gates.selfknowledge import KNOWN, UNKNOWN

# Three wordings of one question each. Fitted on the shared NQ outcomes, the kNN gate
# answers the first directly and retrieves for the second (checked in the tests when the
# shared data is there; on the fallback outcomes the starting decisions differ, and the
# tests check the move feedback makes).
MOON = [
    "who was the first person to walk on the moon",
    "which astronaut first walked on the moon",
    "the first man to set foot on the moon was who",
]
WIMBLEDON = [
    "who won the women's singles at wimbledon in 2017",
    "who was the winner of the 2017 wimbledon ladies singles final",
    "which woman won the wimbledon singles title in 2017",
]
UNRELATED = ["who wrote the lord of the rings books", "how tall is mount everest in feet"]


@pytest.fixture(scope="module")
def cached_embedder(embedder):
    return CachedEmbedder(embedder)


@pytest.fixture
def knn(outcome_records, cached_embedder) -> SKRKnnGate:
    return SKRKnnGate(cached_embedder, k=10, weighting="similarity").fit_outcomes(outcome_records)


@pytest.mark.parametrize(
    ("retrieved", "correct", "wrong_with_retrieval", "label"),
    [
        (False, True, False, KNOWN),  # a = 1 >= b whatever b is
        (False, False, False, UNKNOWN),  # a = 0: only retrieval can help
        (False, False, True, None),  # both answers wrong: dropped, as label_outcomes drops it
        (True, True, False, None),  # a unknown: either label is possible
        (True, False, False, None),
    ],
)
def test_the_label_rule(retrieved, correct, wrong_with_retrieval, label) -> None:
    assert feedback_label(retrieved, correct, wrong_with_retrieval) == label


def test_feedback_that_a_direct_answer_was_wrong_makes_similar_questions_retrieve(knn) -> None:
    before = knn.decide_batch(MOON + UNRELATED)
    assert not any(d.retrieve for d in before[:3])
    for question in MOON[:2]:
        entry = knn.record_feedback(question, retrieved=False, correct=False)
        assert entry.label == UNKNOWN
    after = knn.decide_batch(MOON + UNRELATED)
    assert after[2].retrieve and after[2].score > before[2].score  # an unseen wording of the question
    nearest = after[2].details["neighbours"][0]
    assert nearest["question"] in MOON[:2] and nearest["label"] == "unknown"
    assert [d.score for d in after[3:]] == [d.score for d in before[3:]]  # unrelated questions unmoved


def test_feedback_that_a_direct_answer_was_right_makes_similar_questions_answer_directly(knn) -> None:
    before = knn.decide(WIMBLEDON[2])
    assert before.retrieve
    m, n = knn.memory_.counts
    for question in WIMBLEDON[:2]:
        assert knn.record_feedback(question, retrieved=False, correct=True).label == KNOWN
    assert knn.memory_.counts == (m + 2, n)
    after = knn.decide(WIMBLEDON[2])
    assert not after.retrieve and after.score < before.score


def test_answers_with_retrieval_are_logged_but_teach_nothing_alone(knn) -> None:
    size = len(knn.memory_)
    entries = [knn.record_feedback(MOON[0], True, True), knn.record_feedback(MOON[1], True, False)]
    assert [e.label for e in entries] == [None, None] and len(knn.memory_) == size
    # MOON[1] was already answered wrongly with retrieval: wrong without it too means both wrong.
    assert knn.record_feedback(MOON[1].upper() + "?", False, False).label is None
    assert len(knn.memory_) == size and len(knn.feedback_) == 3


def test_the_classifier_gate_learns_from_feedback_too(outcome_records, cached_embedder) -> None:
    gate = SKRClassifierGate(cached_embedder, class_weight="balanced").fit_outcomes(outcome_records)
    before = gate.score(MOON[2:])[0]
    for question in MOON[:2]:
        gate.record_feedback(question, retrieved=False, correct=False)
    assert gate.score(MOON[2:])[0] > before


def test_feedback_is_saved_with_the_gate(knn, cached_embedder, tmp_path) -> None:
    knn.record_feedback(MOON[0], False, False)
    knn.record_feedback(WIMBLEDON[0], True, False)
    loaded = load_gate(knn.save(tmp_path / "knn"), embedder=cached_embedder)
    assert loaded.feedback_.entries() == knn.feedback_.entries()
    assert len(loaded.memory_) == len(knn.memory_)
    np.testing.assert_array_equal(loaded.score(MOON), knn.score(MOON))
    # A later both-wrong check still sees the retrieved answer logged before the save.
    assert loaded.record_feedback(WIMBLEDON[0], False, False).label is None


def test_a_tampered_feedback_log_is_refused(knn, cached_embedder, tmp_path) -> None:
    knn.record_feedback(MOON[0], False, False)
    path = knn.save(tmp_path / "knn")
    (path / FEEDBACK_FILE).write_text(
        json.dumps({"question": MOON[0], "retrieved": False, "correct": True, "label": KNOWN}) + "\n", encoding="utf-8"
    )
    with pytest.raises(GateLoadError, match=FEEDBACK_FILE):
        load_gate(path, embedder=cached_embedder)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not valid JSON"),
        ('{"question": "q", "retrieved": 1, "correct": true, "label": null}', "wrong type"),
        ('{"question": "q"}', "expected the fields"),
    ],
)
def test_a_malformed_log_names_the_line(tmp_path, line, message) -> None:
    (tmp_path / FEEDBACK_FILE).write_text(line + "\n", encoding="utf-8")
    with pytest.raises(GateLoadError, match=f"line 1: .*{message}"):
        FeedbackLog.load(tmp_path, {"file": FEEDBACK_FILE, "size": 1})


def test_a_gate_that_cannot_learn_says_so() -> None:
    gate = VerbalizedGate()
    assert not gate.learns_online
    with pytest.raises(FeedbackNotSupportedError, match="VerbalizedGate does not learn from feedback"):
        gate.record_feedback(MOON[0], False, False)


def test_bad_feedback_is_refused(knn) -> None:
    with pytest.raises(TypeError, match="retrieved must be a bool"):
        knn.record_feedback(MOON[0], "no", False)
    with pytest.raises(TypeError, match="correct must be a bool"):
        knn.record_feedback(MOON[0], False, 1.0)
    assert len(knn.feedback_) == 0


def test_a_budget_passes_feedback_to_the_gate_it_wraps(knn) -> None:
    budget = BudgetedGate(knn, target_rate=0.3)
    assert budget.learns_online
    budget.record_feedback(MOON[0], False, False)
    assert knn.feedback_.entries()[-1].question == MOON[0]
    with pytest.raises(FeedbackNotSupportedError):
        BudgetedGate(VerbalizedGate(), target_rate=0.3).record_feedback(MOON[0], False, False)


def test_a_decision_teaches_the_gate_through_its_dict(knn) -> None:
    """A framework run carries the decision as ``to_dict``; back as a decision, it
    teaches the gate the question it judged and the route it took."""
    decision = knn.decide(MOON[0])
    carried = GateDecision.from_dict(json.loads(json.dumps(decision.to_dict())))
    assert carried == decision
    entry = knn.record_decision_feedback(carried, correct=False)
    assert (entry.question, entry.retrieved, entry.correct) == (MOON[0], decision.retrieve, False)
    assert knn.feedback_.entries()[-1] == entry
    with pytest.raises(ValueError, match="does not carry the question"):
        knn.record_decision_feedback(GateDecision(False, 0.1, 0.5, "skr-knn"), correct=True)
    with pytest.raises(ValueError, match="must be a GateDecision"):
        knn.record_decision_feedback(decision.to_dict(), correct=True)


def test_a_decision_dict_comes_back_with_nan_for_what_was_not_finite() -> None:
    fallback = GateDecision(True, float("nan"), float("inf"), "verbalized", question="q", error="timed out")
    back = GateDecision.from_dict(fallback.to_dict())
    assert np.isnan(back.score) and np.isnan(back.threshold) and back.error == "timed out"
    good = fallback.to_dict()
    for bad, message in (
        ({**good, "colour": "red"}, r"unknown fields \['colour'\]"),
        ({k: v for k, v in good.items() if k != "gate"}, r"missing fields \['gate'\]"),
        ({**good, "retrieve": "yes"}, "'retrieve' must be a bool"),
        ({**good, "details": []}, "'details' must be a dict"),
        ([("retrieve", True)], "is a mapping"),
    ):
        with pytest.raises(ValueError, match=message):
            GateDecision.from_dict(bad)


def test_a_decision_dict_shares_no_container_with_the_decision(knn) -> None:
    decision = knn.decide(MOON[0])
    out = decision.to_dict()
    assert out == dataclasses.asdict(decision)  # what the generic walk gives, field for field
    out["details"]["neighbours"][0]["question"] = "changed"
    out["details"]["k"] = -1
    assert decision.details["neighbours"][0]["question"] != "changed" and decision.details["k"] > 0
