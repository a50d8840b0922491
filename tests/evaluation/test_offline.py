import json

import numpy as np
import pytest

from adaptive_gates import VerbalizedGate
from adaptive_gates.evaluation import (
    calls_to_match_always,
    evaluate_live,
    evaluate_scores,
    gate_curve,
    lm_calls_per_decision,
    oracle_curve,
    plot_reports,
    random_auc,
    random_band,
)
from adaptive_gates.gates.base.calibration import threshold_for_objective, threshold_for_rate
from adaptive_gates.gates.base.folds import fold_splits
from adaptive_gates.gates.base.percentile import CV_FOLDS, cross_fit
from adaptive_gates.models.chat.base import ChatReply
from adaptive_gates.records.data import QARecord
from adaptive_gates.retrieval import BM25Retriever
from gates.test_skr_prompt import ScriptedChat

# Four questions: retrieval helps q0, hurts q1, changes nothing for q2 (both right) and q3 (both wrong).
A = np.array([0, 1, 1, 0])
B = np.array([1, 0, 1, 0])


def test_curve_by_hand():
    curve = gate_curve(np.array([0.9, 0.1, 0.5, 0.3]), A, B)  # order q0, q2, q3, q1
    np.testing.assert_allclose(curve.rates, [0, 0.25, 0.5, 0.75, 1])
    np.testing.assert_allclose(curve.accuracy, [0.5, 0.75, 0.75, 0.75, 0.5])
    assert curve.auc == pytest.approx(0.25 * (0.625 + 0.75 + 0.75 + 0.625))


def test_ties_earn_the_expected_gain():
    # All scores equal: the gate knows nothing, so its curve is the random line.
    curve = gate_curve(np.zeros(4), A, B)
    np.testing.assert_allclose(curve.accuracy, np.linspace(0.5, 0.5, 5))
    assert curve.auc == pytest.approx(random_auc(A, B))


def test_oracle_orders_help_then_ties_then_hurt():
    oracle = oracle_curve(A, B)
    np.testing.assert_allclose(oracle.accuracy, [0.5, 0.75, 0.75, 0.75, 0.5])
    assert oracle.accuracy.max() == pytest.approx(np.maximum(A, B).mean())


def test_report_fields_and_values():
    scores = np.array([0.9, 0.1, 0.5, 0.3])
    report = evaluate_scores(scores, A, B, gate="g", metric="contains", retrieve=scores > 0.4, target_rate=0.5)
    for key in [
        "gate",
        "n",
        "metric",
        "never",
        "always",
        "oracle",
        "auc",
        "auc_random",
        "auc_oracle",
        "gap_capture",
        "decision_auroc",
        "curve",
        "at_threshold",
    ]:
        assert key in report
    assert report["never"] == 0.5 and report["always"] == 0.5 and report["oracle"] == 0.75
    # The gate ranks the one helpful question first and the hurtful one last: it matches the oracle.
    assert report["gap_capture"] == pytest.approx(1.0)
    assert report["decision_auroc"] == pytest.approx(1.0)
    assert report["at_threshold"] == {"target_rate": 0.5, "retrieval_rate": 0.5, "accuracy": 0.75, "calls_saved": 0.5}
    json.dumps(report)  # JSON-ready


def test_reversed_gate_has_negative_gap_capture():
    report = evaluate_scores(-np.array([0.9, 0.1, 0.5, 0.3]), A, B, gate="g", metric="em")
    assert report["gap_capture"] < 0 and report["decision_auroc"] == pytest.approx(0.0)


def test_no_room_gives_none():
    same = np.array([1, 0, 1])
    report = evaluate_scores(np.array([0.1, 0.2, 0.3]), same, same, gate="g", metric="em")
    assert report["gap_capture"] is None and report["decision_auroc"] is None


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="finite"):
        gate_curve(np.array([np.nan, 0, 0, 0]), A, B)
    with pytest.raises(ValueError, match="scores"):
        gate_curve(np.zeros(3), A, B)


def test_threshold_for_rate_by_hand():
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.6])
    cal = threshold_for_rate(scores, 0.4)
    assert (scores > cal.threshold).sum() == 2 and cal.realised_rate == 0.4
    assert (scores > threshold_for_rate(scores, 0.0).threshold).sum() == 0
    assert (scores > threshold_for_rate(scores, 1.0).threshold).sum() == 5
    with pytest.raises(ValueError):
        threshold_for_rate(scores, 1.5)


def test_threshold_for_rate_with_ties_takes_nearest_reachable_rate():
    scores = np.array([0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    cal = threshold_for_rate(scores, 0.5)  # reachable: 0, .4, .8, 1
    assert cal.realised_rate == pytest.approx(0.4)
    assert (scores > cal.threshold).mean() == pytest.approx(0.4)


def test_threshold_for_objective_by_hand():
    scores = np.array([0.9, 0.1, 0.5, 0.3])
    cal = threshold_for_objective(scores, A, B)
    # Best accuracy 0.75 is first reached retrieving q0 alone: fewest retrievals win.
    assert cal.accuracy == pytest.approx(0.75) and cal.realised_rate == pytest.approx(0.25)
    assert (scores > cal.threshold).tolist() == [True, False, False, False]
    capped = threshold_for_objective(scores, A, B, max_rate=0.0)
    assert capped.realised_rate == 0.0 and capped.accuracy == pytest.approx(0.5)


def test_plot_writes_png(tmp_path):
    report = evaluate_scores(
        np.array([0.9, 0.1, 0.5, 0.3]), A, B, gate="g", metric="em", retrieve=np.array([1, 0, 1, 0])
    )
    path = plot_reports([report], tmp_path / "curve.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        plot_reports([], tmp_path / "x.png")


def test_fold_splits_partition_the_items_by_seed():
    splits = list(fold_splits(10, 3, seed=7))
    held = [set(h.tolist()) for _, h in splits]
    assert sorted(len(h) for h in held) == [3, 3, 4]
    assert set().union(*held) == set(range(10))
    for kept, held_out in splits:
        assert kept.tolist() == sorted(set(range(10)) - set(held_out.tolist()))
    again = [h.tolist() for _, h in fold_splits(10, 3, seed=7)]
    assert again == [h.tolist() for _, h in splits]
    assert again != [h.tolist() for _, h in fold_splits(10, 3, seed=8)]
    with pytest.raises(ValueError, match="folds"):
        list(fold_splits(3, 4, seed=0))


def test_gate_cross_fitting_holds_out_the_folds_evaluation_uses():
    seen = []

    def score_fold(kept, held_out):
        seen.append((kept.tolist(), held_out.tolist()))
        return np.zeros(len(held_out))

    cross_fit(30, 5, score_fold)
    assert seen == [(k.tolist(), h.tolist()) for k, h in fold_splits(30, min(CV_FOLDS, 30), 5)]


# Five questions for the field's units: retrieval helps q0 and q1, hurts q2, and
# changes nothing for q3 (right both ways) and q4 (wrong both ways). Never 0.4, always 0.6.
A5 = np.array([0, 0, 1, 1, 0])
B5 = np.array([1, 1, 0, 1, 0])


def test_units_at_the_decisions_by_hand():
    # Order q2, q0, q1, q3, q4: accuracy 0.4, 0.2, 0.4, 0.6, 0.6, 0.6 at rates 0 .. 1.
    scores = np.array([0.8, 0.7, 0.9, 0.2, 0.1])
    retrieve = scores > 0.75  # q2 and q0
    report = evaluate_scores(scores, A5, B5, gate="g", metric="contains", retrieve=retrieve)
    # q0 right with retrieval, q2 wrong with it, q1/q4 wrong and q3 right without.
    assert report["in_accuracy"] == pytest.approx(0.4) == report["at_threshold"]["accuracy"]
    assert report["retrieval_calls"] == pytest.approx(0.4)
    assert report["lm_calls"] == 1.0  # a gate that reads the question only: one answer each
    assert report["calls_to_match_always"] == pytest.approx(0.6)
    assert report["random_band"] == random_band(A5, B5, retrieve)
    json.dumps(report)


def test_an_answer_first_gate_pays_one_call_plus_its_retrievals():
    retrieve = np.array([True, True, False, False, False])
    calls = lm_calls_per_decision(retrieve, answers_first=True)
    np.testing.assert_array_equal(calls, [2, 2, 1, 1, 1])
    report = evaluate_scores(
        np.arange(5.0)[::-1], A5, B5, gate="g", metric="contains", retrieve=retrieve, lm_calls=calls
    )
    assert report["lm_calls"] == pytest.approx(1.4)
    # Order q0, q1, q2, ...: 0.6 already at rate 0.2 (q0 alone), 0.8 at 0.4.
    assert report["calls_to_match_always"] == pytest.approx(0.2)


def test_live_lm_calls_count_the_gates_own_calls_and_reused_drafts():
    # q0: two calls to decide, retrieves (one more); q1: one call, its draft is the
    # answer; q2: one call but no usable draft, so it is answered again.
    calls = lm_calls_per_decision(np.array([True, False, False]), gate_calls=[2, 1, 1], drafts=[True, True, False])
    np.testing.assert_array_equal(calls, [3, 1, 2])
    with pytest.raises(ValueError, match="2 gate call counts"):
        lm_calls_per_decision(np.array([True, False, False]), gate_calls=[2, 1])


def test_live_evaluation_reuses_the_answer_the_gate_got_whatever_it_decided(corpus_path):
    # A certain reply (its draft is served), an uncertain one (retrieves) and one never
    # judged (the fallback): the gate got each answer without passages, so the
    # evaluation asks its answerer for none of them.
    replies = {"France": "Paris, certain.", "Italy": "Rome (uncertain)", "Spain": "Madrid"}
    chat = ScriptedChat(
        {
            "ask": lambda prompt: ChatReply(next(reply for country, reply in replies.items() if country in prompt)),
            "judgement": ChatReply("Hmm."),
        }
    )
    records = [QARecord(country, f"What is the capital of {country}?", [city]) for country, city in replies.items()]
    report = evaluate_live(
        VerbalizedGate(chat), records, BM25Retriever.from_jsonl(corpus_path), PassagesOnly(), k=1, progress=False
    )
    rows = report["questions"]
    assert [(r["retrieve"], r["error"] is None) for r in rows] == [(False, True), (True, True), (True, False)]
    assert [r["answer_without"] for r in rows] == ["Paris", "Rome", "Madrid"]
    assert report["llm_answer_calls"] == 0 and report["drafts_reused"] == 3


class PassagesOnly:
    """An answerer asked only with passages: the answers without come from the gate."""

    def answer_batch(self, questions, passages=None):
        assert passages is not None, "the gate's own answer was not reused"
        return ["from the passages"] * len(questions)


def test_calls_to_match_always_is_zero_when_never_retrieving_is_as_good():
    a, b = np.array([1, 1, 0]), np.array([1, 0, 0])  # never 2/3, always 1/3
    report = evaluate_scores(np.array([0.3, 0.2, 0.1]), a, b, gate="g", metric="em", retrieve=np.zeros(3, bool))
    assert report["calls_to_match_always"] == 0.0
    assert report["in_accuracy"] == pytest.approx(2 / 3) and report["retrieval_calls"] == 0.0


def test_calls_to_match_always_is_every_call_when_the_curve_gets_there_only_at_the_end():
    # Order q2, q3, q4, q0, q1: 0.4, 0.2, 0.2, 0.2, 0.4, 0.6 — always's 0.6 only at rate 1.
    curve = gate_curve(np.array([0.2, 0.1, 0.9, 0.8, 0.7]), A5, B5)
    assert calls_to_match_always(curve, 0.6) == 1.0


def test_random_band_by_hand_when_every_question_gains_alike():
    # Retrieval turns every answer right: any gate retrieving 2 of 4 scores 0.5, and the
    # oracle is the random line (gap capture undefined).
    a, b = np.zeros(4), np.ones(4)
    report = evaluate_scores(np.arange(4.0), a, b, gate="g", metric="em", retrieve=np.array([1, 1, 0, 0], bool))
    band = report["random_band"]
    assert band["gap_capture"] is None and band["accuracy"] == [0.5, 0.5] and band["retrieval_rate"] == 0.5
    assert band["level"] == 0.95 and report["calls_to_match_always"] == 1.0


def test_a_report_without_decisions_has_no_units():
    report = evaluate_scores(np.arange(5.0), A5, B5, gate="g", metric="em")
    assert not {"in_accuracy", "retrieval_calls", "lm_calls", "calls_to_match_always", "random_band"} & set(report)
