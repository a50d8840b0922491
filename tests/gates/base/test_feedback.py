"""Feedback: the label rule, later decisions on similar questions changed by it (real
MiniLM, real outcome records, hand-written paraphrases), the rule that a verdict never
moves a decision the wrong way over repeated verdicts, the log saved with the gate, and
gates that cannot learn saying so."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from adaptive_gates import (
    BudgetedGate,
    ExactMemory,
    FaissMemory,
    FeedbackLog,
    FeedbackNotSupportedError,
    GateDecision,
    GateLoadError,
    SKRClassifierGate,
    SKRKnnGate,
    VerbalizedGate,
    load_gate,
)
from adaptive_gates.gates.base.feedback import FEEDBACK_FILE, feedback_label
from adaptive_gates.persistence.json_lines import LINE_BREAKS_LEFT_RAW
from adaptive_gates.persistence.saved_format import CONFIG_FILE, with_checksums
from adaptive_gates.records.selfknowledge import KNOWN, UNKNOWN
from support.feedback_checks import VerdictWatch  # the rule's check, shared with the framework suites

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
#: Judged over and over in the rule's tests (with the first known training question).
HAMLET = "Who wrote the play Hamlet?"


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


def _known_training_question_answered_directly(gate: SKRKnnGate) -> str:
    _, labels, questions = gate.memory_.entries()
    known = [q for q, label in zip(questions, labels) if label == KNOWN]
    return next(d.question for d in gate.decide_batch(known[:20]) if not d.retrieve)


@pytest.mark.parametrize(
    ("k", "vote", "weighting"),
    [(3, "ratio", "uniform"), (10, "ratio", "uniform"), (3, "majority", "similarity")],
)
def test_a_wrong_direct_answer_never_moves_a_decision_towards_answering_directly(
    outcome_records, cached_embedder, k, vote, weighting
) -> None:
    """Round after round of verdicts that direct answers were wrong, on new questions and
    on one the memory holds as known and answers directly: after each, the threshold is where it was, no
    question's score falls, no decision goes from retrieve to direct; after ``k`` rounds
    every judged question retrieves with score 1 (its k nearest are its unknown copies)."""
    gate = SKRKnnGate(cached_embedder, k=k, vote=vote, weighting=weighting).fit_outcomes(outcome_records)
    trained = _known_training_question_answered_directly(gate)
    judged = [HAMLET, MOON[0], WIMBLEDON[0], trained]
    prior = gate.prior_counts_
    watch = VerdictWatch(gate, judged + MOON[1:] + WIMBLEDON[1:] + UNRELATED)
    for _ in range(k):
        for question in judged:
            entry = gate.record_feedback(question, retrieved=False, correct=False)
            assert entry.label == UNKNOWN
            watch.check(entry)
    assert gate.prior_counts_ == prior
    after = gate.decide_batch(judged)
    assert all(d.retrieve and d.score == 1.0 for d in after)
    # The known training copy of the judged question now counts as unknown.
    own = [n["label"] for n in after[3].details["neighbours"] if n["question"] == trained]
    assert own and set(own) == {"unknown"}
    assert len(gate.memory_) == sum(prior) + k * len(judged)


def test_a_wrong_direct_answer_never_moves_the_threshold_of_the_default_gate(outcome_records, cached_embedder) -> None:
    """What was reported: under the default ratio vote each unknown label raised the
    prior share the threshold is, and HAMLET went from retrieve back to direct."""
    gate = SKRKnnGate(cached_embedder).fit_outcomes(outcome_records)
    m, n = gate.memory_.counts
    assert gate.threshold_ == n / (m + n) and gate.prior_counts_ == (m, n)
    for _ in range(3):
        gate.record_feedback(HAMLET, retrieved=False, correct=False)
        assert gate.threshold_ == n / (m + n)
        assert gate.decide(HAMLET).retrieve
    assert gate.memory_.counts == (m, n + 3)
    # Labelled questions added on purpose are data the prior is estimated from.
    gate.add([MOON[0], WIMBLEDON[0]], [KNOWN, UNKNOWN])
    assert gate.prior_counts_ == (m + 1, n + 1) and gate.threshold_ == (n + 1) / (m + n + 2)


def test_a_right_direct_answer_never_moves_a_decision_towards_retrieval(knn) -> None:
    """The mirror rule: verdicts that direct answers were right never raise a score; a
    verdict on an answer with retrieval changes no score at all; the latest verdict on a
    question outweighs the earlier ones."""
    assert knn.decide(WIMBLEDON[0]).retrieve
    watch = VerdictWatch(knn, MOON + WIMBLEDON + UNRELATED)
    for _ in range(3):
        for question in (WIMBLEDON[0], MOON[1]):
            entry = knn.record_feedback(question, retrieved=False, correct=True)
            assert entry.label == KNOWN
            watch.check(entry)
        watch.check(knn.record_feedback(UNRELATED[0], retrieved=True, correct=True))
        watch.check(knn.record_feedback(UNRELATED[1], retrieved=True, correct=False))
    assert not knn.decide(WIMBLEDON[0]).retrieve  # after three right verdicts
    # A later wrong verdict outweighs the three right ones: all four copies are unknown
    # now, four of its ten neighbours at similarity 1, so its score is at least 0.4.
    knn.record_feedback(WIMBLEDON[0], retrieved=False, correct=False)
    turned = knn.decide(WIMBLEDON[0])
    own = [n["label"] for n in turned.details["neighbours"] if n["question"] == WIMBLEDON[0]]
    assert own == ["unknown"] * 4 and turned.score >= 0.4 and turned.retrieve
    assert knn.feedback_.verdict(WIMBLEDON[0]) == UNKNOWN


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
    assert len(loaded.memory_) == len(knn.memory_) and loaded.prior_counts_ == knn.prior_counts_
    np.testing.assert_array_equal(loaded.score(MOON), knn.score(MOON))
    # A later both-wrong check still sees the retrieved answer logged before the save.
    assert loaded.record_feedback(WIMBLEDON[0], False, False).label is None


@pytest.mark.parametrize("breaker", LINE_BREAKS_LEFT_RAW)
def test_a_question_holding_a_line_separator_is_saved_and_loaded(knn, cached_embedder, tmp_path, breaker) -> None:
    question = f"who was the first person{breaker}to walk on the moon"
    knn.record_feedback(question, False, False)
    path = knn.save(tmp_path / "knn")
    assert len((path / FEEDBACK_FILE).read_text(encoding="utf-8").splitlines()) == 1  # escaped on its line
    loaded = load_gate(path, embedder=cached_embedder)
    assert loaded.feedback_.entries() == knn.feedback_.entries()
    assert loaded.feedback_.entries()[-1].question == question


@pytest.mark.parametrize("breaker", LINE_BREAKS_LEFT_RAW)
def test_a_log_written_with_a_raw_line_separator_is_read(tmp_path, breaker) -> None:
    """A log saved before the separators were escaped holds them raw inside a string."""
    row = {"question": f"who wrote{breaker}Hamlet", "retrieved": False, "correct": False, "label": UNKNOWN}
    (tmp_path / FEEDBACK_FILE).write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    loaded = FeedbackLog.load(tmp_path, {"file": FEEDBACK_FILE, "size": 1})
    assert loaded.entries()[0].question == row["question"]


def test_a_gate_saved_before_the_prior_was_recorded_loads_with_the_prior_it_had(knn, cached_embedder, tmp_path) -> None:
    """Such a save added every labelled observation to the memory, so its prior is the
    memory's counts less those; its verdicts are read back from its log."""
    prior = knn.prior_counts_
    knn.record_feedback(HAMLET, False, False)
    knn.record_feedback(HAMLET, False, False)
    knn.record_feedback(WIMBLEDON[0], False, True)
    path = knn.save(tmp_path / "knn")
    config = json.loads((path / CONFIG_FILE).read_text())
    assert config["state"].pop("prior_counts") == list(prior)
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))

    loaded = load_gate(path, embedder=cached_embedder)
    assert loaded.prior_counts_ == prior and loaded.threshold_ == knn.threshold_
    np.testing.assert_array_equal(loaded.score([HAMLET, *WIMBLEDON]), knn.score([HAMLET, *WIMBLEDON]))
    assert loaded.feedback_.verdict(HAMLET.lower()) == UNKNOWN

    config["state"]["prior_counts"] = [len(knn.memory_), 1]  # more than the memory holds
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))
    with pytest.raises(GateLoadError, match="prior_counts"):
        load_gate(path, embedder=cached_embedder)


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
        ("not json", "not readable JSON"),
        ("[" * 100_000, "nested 100000 levels deep"),
        ('{"question": "q", "retrieved": false, "correct": true, "label": NaN}', "NaN is not a number"),
        ('{"question": "q", "retrieved": 1, "correct": true, "label": null}', "wrong type"),
        ('{"question": "q"}', "expected the fields"),
    ],
)
def test_a_malformed_log_names_the_line(tmp_path, line, message) -> None:
    (tmp_path / FEEDBACK_FILE).write_text(line + "\n", encoding="utf-8")
    with pytest.raises(GateLoadError, match=f"line 1: .*{message}"):
        FeedbackLog.load(tmp_path, {"file": FEEDBACK_FILE, "size": 1})


def test_a_log_that_is_not_utf8_is_refused_naming_it(tmp_path) -> None:
    (tmp_path / FEEDBACK_FILE).write_bytes(b'{"question": "\xff"}\n')
    with pytest.raises(GateLoadError, match=f"{FEEDBACK_FILE}' is unreadable .*utf-8"):
        FeedbackLog.load(tmp_path, {"file": FEEDBACK_FILE, "size": 1})


@pytest.mark.parametrize("memory", [FaissMemory, ExactMemory])
def test_withdrawn_lessons_leave_the_gate_as_if_never_given(outcome_records, cached_embedder, memory) -> None:
    """A poisoning (wrong-answer verdicts on paraphrases) among honest lessons, taken
    back out of order: memory, verdicts and scores are those of a gate that was only
    ever given the honest lessons, the later verdict on a poisoned question included."""

    def gate() -> SKRKnnGate:
        return SKRKnnGate(cached_embedder, k=10, weighting="similarity", memory=memory).fit_outcomes(outcome_records)

    asked = MOON + WIMBLEDON + UNRELATED
    taught, honest_only = gate(), gate()
    poison = [taught.record_feedback(q, retrieved=False, correct=False) for q in (*MOON, MOON[0])]
    honest = [(WIMBLEDON[0], False, True), (MOON[0], False, True), (WIMBLEDON[1], True, False)]
    for lesson in honest:
        taught.record_feedback(*lesson)
        honest_only.record_feedback(*lesson)
    poisoned_scores = taught.score(MOON)

    for index in (3, 0, 2, 1):
        taught.withdraw_feedback(poison[index])

    assert taught.feedback_.entries() == honest_only.feedback_.entries()
    for ours, twins in zip(taught.memory_.entries(), honest_only.memory_.entries()):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(twins))
    np.testing.assert_array_equal(taught.score(asked), honest_only.score(asked))
    assert taught.score(MOON)[2] < poisoned_scores[2]
    assert taught.feedback_.verdict(MOON[0]) == KNOWN  # the honest verdict given after the poison stands
    with pytest.raises(ValueError, match="holds no entry"):
        taught.withdraw_feedback(poison[0])  # taken back already: nothing changes
    assert len(taught.memory_) == len(honest_only.memory_)


def test_a_withdrawn_lesson_is_gone_after_a_save(knn, cached_embedder, tmp_path) -> None:
    before = knn.score(MOON)
    wrong = knn.record_feedback(MOON[0], False, False)
    knn.withdraw_feedback(wrong)
    loaded = load_gate(knn.save(tmp_path / "knn"), embedder=cached_embedder)
    assert len(loaded.feedback_) == 0 and len(loaded.memory_) == len(knn.memory_)
    np.testing.assert_array_equal(loaded.score(MOON), before)


def test_an_approximate_memory_takes_a_question_back(outcome_records, cached_embedder) -> None:
    """faiss's HNSW index cannot drop a row: it is built again over the rows left."""
    questions = [r.question for r in outcome_records[:60]]
    vectors = cached_embedder.embed(questions)
    memory = FaissMemory(vectors.shape[1], index="hnsw", switch_at=20)
    memory.add(vectors, [i % 2 for i in range(60)], questions)
    kept = memory.entries()
    memory.add(vectors[5:6], [KNOWN], questions[5:6])  # a second copy of a stored question
    assert memory.remove_copy(questions[5], KNOWN) and memory.structure == "hnsw"
    for ours, before in zip(memory.entries(), kept):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(before))
    assert not memory.remove_copy(questions[5], KNOWN)  # its one copy was added as unknown
    assert memory.remove_copy(questions[5], UNKNOWN) and len(memory) == 59
    _, _, found = memory.search(vectors[5:6], 3)
    assert questions[5] not in found[0]


def test_judged_verdicts_teach_the_served_answer_then_the_answer_without_retrieval(knn) -> None:
    retrieved = next(d for d in knn.decide_batch(MOON + WIMBLEDON) if d.retrieve)
    taught = knn.record_judged_feedback(retrieved, correct=True, draft_correct=True)
    assert [(f.question, f.retrieved, f.correct, f.label) for f in taught] == [
        (retrieved.question, True, True, None),
        (retrieved.question, False, True, KNOWN),  # retrieval was not needed
    ]
    direct = next(d for d in knn.decide_batch(UNRELATED + MOON) if not d.retrieve)
    assert (
        len(knn.record_judged_feedback(direct, correct=False, draft_correct=True)) == 1
    )  # served without: one verdict


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
    budget.withdraw_feedback(knn.feedback_.entries()[-1])
    assert len(knn.feedback_) == 0
    with pytest.raises(FeedbackNotSupportedError, match="holds none to take back"):
        VerbalizedGate().withdraw_feedback(knn.record_feedback(MOON[0], False, False))


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
    assert back.llm_calls is None and back.answer_without_retrieval is None
    saved_before_the_fields = {
        k: v for k, v in fallback.to_dict().items() if k not in ("llm_calls", "answer_without_retrieval")
    }
    earlier = GateDecision.from_dict(saved_before_the_fields)
    assert earlier.llm_calls is None and earlier.answer_without_retrieval is None
    counted = dataclasses.replace(fallback, llm_calls=2.0, answer_without_retrieval="Paris")
    again = GateDecision.from_dict(json.loads(json.dumps(counted.to_dict())))
    assert again.llm_calls == 2 and again.answer_without_retrieval == "Paris"
    good = fallback.to_dict()
    for bad, message in (
        ({**good, "colour": "red"}, r"unknown fields \['colour'\]"),
        ({k: v for k, v in good.items() if k != "gate"}, r"missing fields \['gate'\]"),
        ({**good, "retrieve": "yes"}, "'retrieve' must be a bool"),
        ({**good, "details": []}, "'details' must be a dict"),
        ({**good, "llm_calls": "two"}, "'llm_calls' must be a number or None"),
        ({**good, "llm_calls": True}, "'llm_calls' must be a number or None"),
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


def _copies_of(gate: SKRKnnGate, question: str) -> list[int]:
    """The labels of the memory's copies of ``question``, in insertion order."""
    _, labels, questions = gate.memory_.entries()
    return [int(label) for label, q in zip(labels.tolist(), questions) if q == question]


def _withdraw_from_two_threads(gate: SKRKnnGate, entry) -> list[str]:
    """Two threads withdraw ``entry`` at once; what each ended with ("ok" or the error)."""
    start = threading.Barrier(2)

    def withdraw() -> str:
        start.wait()
        try:
            gate.withdraw_feedback(entry)
        except ValueError as exc:
            return str(exc)
        return "ok"

    with ThreadPoolExecutor(2) as pool:
        return [f.result() for f in [pool.submit(withdraw) for _ in range(2)]]


@pytest.fixture
def rapid_switching():
    """Threads switched every microsecond, so a race shows in a few rounds."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("rapid_switching")
@pytest.mark.parametrize("memory", [FaissMemory, ExactMemory])
def test_one_lesson_withdrawn_from_two_threads_leaves_the_training_rows(
    outcome_records, cached_embedder, memory
) -> None:
    """The lesson agrees with the training label, so a second removal would take the
    training row: one thread takes the lesson back, the other is told the log holds none."""
    gate = SKRKnnGate(cached_embedder, k=10, memory=memory).fit_outcomes(outcome_records)
    trained = next(q for q, label in zip(gate.memory_.entries()[2], gate.memory_.entries()[1]) if label == KNOWN)
    size = len(gate.memory_)
    for _ in range(25):
        entry = gate.record_feedback(trained, retrieved=False, correct=True)
        assert _copies_of(gate, trained) == [KNOWN, KNOWN]
        outcomes = _withdraw_from_two_threads(gate, entry)
        assert sorted(outcomes)[0] == "ok" and "holds no entry" in sorted(outcomes)[1], outcomes
        assert _copies_of(gate, trained) == [KNOWN] and len(gate.memory_) == size
    assert len(gate.feedback_) == 0
