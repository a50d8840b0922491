"""What every gate shares (``Gate``): registry, scoring, decisions, thresholds,
calibration, saving, feedback and listeners, shown on real gates."""

from __future__ import annotations

import asyncio
import math
import warnings

import numpy as np
import pytest

from adaptive_gates.errors import InvalidQuestionError, NotFittedError
from adaptive_gates.gates import BM25DifficultyGate, LogprobGate, SKRKnnGate, VerbalizedGate
from adaptive_gates.gates.base.calibration import CalibrationWarning
from adaptive_gates.gates.base.feedback import FeedbackNotSupportedError
from adaptive_gates.gates.base.gate import Gate, load_gate
from adaptive_gates.records.decision import GateDecision


@pytest.fixture(scope="module")
def questions(qa_records):
    return [r.question for r in qa_records[:80]]


@pytest.fixture(scope="module")
def bm25(questions):
    return BM25DifficultyGate().fit(questions[:60])


class Recorder:
    def __init__(self):
        self.decisions = []

    def on_decision(self, decision):
        self.decisions.append(decision)


def test_every_gate_class_is_registered_by_name():
    names = Gate.gate_names()
    assert names == sorted(names)
    assert {"bm25-difficulty", "skr-knn", "popularity", "logprob"} <= set(names)
    assert Gate.gate_class("bm25-difficulty") is BM25DifficultyGate
    with pytest.raises(ValueError, match=r"unknown gate 'nope'; choose from"):
        Gate.gate_class("nope")
    with pytest.raises(ValueError, match=r"unknown gate"):
        Gate.gate_class(None)


def test_an_unfitted_gate_says_how_to_fit_it(questions):
    gate = BM25DifficultyGate()
    for call in (lambda: gate.score(questions[:2]), lambda: gate.threshold_, lambda: gate.decide(questions[0])):
        with pytest.raises(NotFittedError, match=r"BM25DifficultyGate is not fitted: call fit\(questions\)"):
            call()
    with pytest.raises(NotFittedError):
        gate.save("never-written")


def test_gates_without_a_verb_say_so():
    with pytest.raises(NotImplementedError, match=r"LogprobGate has no fit"):
        LogprobGate().fit(["Who wrote Hamlet?"])
    with pytest.raises(NotImplementedError, match=r"VerbalizedGate does not learn from outcome records; it is ready"):
        VerbalizedGate().fit_outcomes([])


def test_scores_are_higher_for_unfamiliar_questions(bm25, questions):
    familiar, unseen = questions[0], "Zxqv blorptang quizzical flumph?"
    scores = bm25.score([familiar, unseen])
    assert scores.shape == (2,) and scores.dtype == np.float64
    assert scores[1] > scores[0]
    assert bm25.score([]).shape == (0,)
    with pytest.raises(InvalidQuestionError):
        bm25.score(["fine question?", ""])


def test_decide_batch_decides_by_the_threshold_and_falls_back_on_bad_questions(bm25, questions):
    batch = [questions[60], "", questions[61], 42]
    decisions = bm25.decide_batch(batch)
    assert len(decisions) == 4
    threshold = bm25.threshold_
    for i in (0, 2):
        d = decisions[i]
        assert d.error is None and d.gate == "bm25-difficulty" and d.question == batch[i]
        assert d.threshold == threshold and d.retrieve == (d.score > threshold)
        assert "familiarity" in d.details
    for i in (1, 3):
        d = decisions[i]
        assert d.is_fallback and d.retrieve is True and d.error.startswith("invalid question")
        assert math.isnan(d.score)
    assert bm25.decide(questions[60]).score == decisions[0].score
    with pytest.raises(InvalidQuestionError):
        bm25.decide_batch("a single string")


def test_fallback_retrieve_false_answers_directly(questions):
    gate = BM25DifficultyGate(fallback_retrieve=False).fit(questions[:20])
    decision = gate.decide("   ")
    assert decision.is_fallback and decision.retrieve is False
    direct = gate.fallback_decision("q?", "backend error: down")
    assert direct.retrieve is False and direct.error == "backend error: down" and direct.question == "q?"


def test_calibration_to_a_rate_and_back(bm25, questions):
    held_out = questions[60:80]
    bm25.calibrate(held_out, 0.25)
    try:
        assert bm25.calibration_.method == "rate" and bm25.calibration_.n == 20
        assert np.mean(bm25.score(held_out) > bm25.threshold_) == pytest.approx(bm25.calibration_.realised_rate)
        at_half = bm25.threshold_at_rate(0.5)
        assert at_half <= bm25.threshold_
    finally:
        bm25.reset_threshold()
    assert bm25.calibration_ is None
    with pytest.raises(ValueError, match=r"is not calibrated"):
        bm25.threshold_at_rate(0.5)


def test_calibration_for_accuracy_on_outcomes(outcome_records):
    records = outcome_records[:60]
    gate = BM25DifficultyGate().fit_outcomes(records[:40])
    held = [r.question for r in records[40:]]
    a = [i % 3 == 0 for i in range(20)]
    b = [i % 2 == 0 for i in range(20)]
    gate.calibrate(held, correct_without=a, correct_with=b, max_rate=0.5)
    assert gate.calibration_.method == "objective"
    assert gate.calibration_.realised_rate <= 0.5


def test_calibrate_refuses_mixed_or_missing_goals(bm25, questions):
    scores = bm25.score(questions[60:80])
    with pytest.raises(ValueError, match=r"either target_rate or"):
        bm25.calibrate_scores(scores)
    with pytest.raises(ValueError, match=r"either target_rate or"):
        bm25.calibrate_scores(scores, 0.3, correct_without=[0] * 20, correct_with=[1] * 20)
    with pytest.raises(ValueError, match=r"needs both"):
        bm25.calibrate_scores(scores, correct_without=[0] * 20)
    with pytest.raises(ValueError, match=r"max_rate applies to outcome calibration only"):
        bm25.calibrate_scores(scores, 0.3, max_rate=0.5)
    assert bm25.calibration_ is None


def test_few_calibration_questions_warn(questions):
    gate = BM25DifficultyGate().fit(questions[:20])
    with pytest.warns(CalibrationWarning):
        gate.calibrate(questions[20:25], 0.4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gate.calibrate(questions[20:45], 0.4)


def test_retaken_at_applies_another_threshold(bm25, questions):
    decision = bm25.decide(questions[65])
    above = bm25.retaken_at(decision, decision.score - 1.0)
    below = bm25.retaken_at(decision, decision.score)
    assert above.retrieve is True and above.threshold == decision.score - 1.0
    assert below.retrieve is False and below.draft_answer is None  # this gate writes no draft
    fallback = bm25.decide("")
    kept = bm25.retaken_at(fallback, -100.0)
    assert kept.retrieve == fallback.retrieve and kept.threshold == -100.0


def test_save_and_load_keep_the_calibrated_threshold(questions, tmp_path):
    gate = BM25DifficultyGate(top_k=5).fit(questions[:30]).calibrate(questions[30:55], 0.3)
    path = gate.save(tmp_path / "g")
    loaded = load_gate(path)
    assert type(loaded) is BM25DifficultyGate and loaded.top_k == 5
    assert loaded.threshold_ == gate.threshold_
    assert loaded.calibration_ == gate.calibration_
    np.testing.assert_allclose(loaded.score(questions[55:60]), gate.score(questions[55:60]))
    with pytest.raises(FileExistsError):
        gate.save(path)
    assert gate.save(path, overwrite=True) == path
    assert repr(loaded) == "BM25DifficultyGate(top_k=5, fallback_retrieve=True)"


def test_params_follow_the_scikit_learn_conventions(bm25):
    assert BM25DifficultyGate.param_names() == ["top_k", "fallback_retrieve"]
    assert bm25.get_params() == {"top_k": 10, "fallback_retrieve": True}
    clone = bm25.__sklearn_clone__()
    assert not clone.is_fitted and clone.get_params() == bm25.get_params()
    assert clone.set_params(top_k=3) is clone and clone.top_k == 3
    with pytest.raises(TypeError):
        BM25DifficultyGate(fallback_retrieve="yes")
    assert bm25.__sklearn_is_fitted__() is True


def test_feedback_is_refused_by_gates_that_do_not_learn_online(bm25, questions):
    assert bm25.learns_online is False
    with pytest.raises(FeedbackNotSupportedError, match=r"does not learn from feedback"):
        bm25.record_feedback(questions[0], True, True)
    decision = bm25.decide(questions[62])
    with pytest.raises(FeedbackNotSupportedError):
        bm25.record_decision_feedback(decision, correct=True)
    with pytest.raises(ValueError, match=r"must be a GateDecision"):
        bm25.record_decision_feedback("not a decision", correct=True)
    anonymous = GateDecision(retrieve=True, score=0.5, threshold=0.1, gate="bm25-difficulty")
    with pytest.raises(ValueError, match=r"does not carry the question"):
        bm25.record_decision_feedback(anonymous, correct=True)


def test_judged_feedback_teaches_an_online_gate(cached_embedder, questions):
    gate = SKRKnnGate(cached_embedder, k=3).fit(questions[:10], [0, 1] * 5)
    assert gate.learns_online
    size = len(gate.memory_)
    decision = gate.decide(questions[20])
    retrieved = GateDecision(**{**decision.__dict__, "retrieve": True})
    taught = gate.record_judged_feedback(retrieved, correct=True, draft_correct=True)
    assert len(taught) == 2
    assert taught[0].question == taught[1].question == questions[20]
    assert taught[0].retrieved is True and taught[1].retrieved is False
    assert len(gate.memory_) > size
    only_answer = gate.record_judged_feedback(retrieved, correct=False)
    assert len(only_answer) == 1


def test_listeners_hear_every_decision_until_removed(questions):
    gate = BM25DifficultyGate().fit(questions[:20])
    heard = Recorder()
    gate.add_listener(heard)
    assert gate.listeners == (heard,)
    decisions = gate.decide_batch([questions[30], ""])
    assert heard.decisions == decisions
    gate.remove_listener(heard)
    gate.decide(questions[31])
    assert len(heard.decisions) == 2
    with pytest.raises(ValueError, match=r"is not a listener"):
        gate.remove_listener(heard)
    with pytest.raises(TypeError, match=r"needs on_decision or on_llm_call"):
        gate.add_listener(object())


def test_async_decisions_match_the_sync_ones(bm25, questions):
    batch = [questions[70], questions[71], ""]
    sync = bm25.decide_batch(batch)
    awaited = asyncio.run(bm25.adecide_batch(batch))
    assert [d.retrieve for d in awaited] == [d.retrieve for d in sync]
    assert [d.score for d in awaited[:2]] == [d.score for d in sync[:2]]
    assert awaited[2].is_fallback
    assert asyncio.run(bm25.adecide(questions[70])).score == sync[0].score
    assessment = asyncio.run(bm25.aassess([questions[70]]))
    assert assessment.scores[0] == sync[0].score
