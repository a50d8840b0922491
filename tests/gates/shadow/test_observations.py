"""What a shadow-learning draft-check gate learns from: pairs, verdicts, their log and the refit."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

from adaptive_gates.errors import GateLoadError
from adaptive_gates.gates.combiner.features import fit_feature_combiner
from adaptive_gates.gates.shadow.observations import (
    LOG_FILE,
    MIN_ROWS,
    FitRows,
    Observation,
    Refit,
    ShadowLog,
    agreement_helps,
    pair,
    refit,
    same_question,
    teaching,
    verdict,
)
from adaptive_gates.persistence.json_lines import LINE_BREAKS_LEFT_RAW
from adaptive_gates.records.selfknowledge import KNOWN, UNKNOWN, agreement_records, outcome_scores


def test_a_pair_helps_where_the_answer_over_passages_differs_from_the_draft():
    differs = pair("Who wrote Hamlet?", "Marlowe", "William Shakespeare", "retrieved", 1.0)
    assert differs.helps == 1.0 and differs.weight == 1.0
    same = pair("Who wrote Hamlet?", "It was William Shakespeare.", "William Shakespeare", "shadow", 0.25)
    assert same.helps == 0.0 and same.weight == 4.0 and same.source == "shadow"
    empty = pair("Who wrote Hamlet?", "Marlowe", "", "retrieved", 1.0)
    assert empty.helps == 0.0  # an empty answer over the passages helps nowhere
    with pytest.raises(ValueError, match=r"observed as 'retrieved' or 'shadow'"):
        pair("q", "d", "a", "verdict", 1.0)
    for bad in (0, 0.0, 1.5, True, "1"):
        with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
            pair("q", "d", "a", "shadow", bad)


def test_agreement_helps_grades_records_as_agreement_records_do(outcome_records):
    records = outcome_records[:100]
    helps = agreement_helps(records)
    a, b = outcome_scores(agreement_records(records))
    np.testing.assert_array_equal(helps, (b > a).astype(float))
    assert 0 < helps.mean() < 1


def test_verdicts_follow_the_feedback_rule():
    right = verdict("q", "draft", retrieved=False, correct=True, wrong_with_retrieval=False)
    assert right.helps == 0.0 and right.feedback().label == KNOWN
    wrong = verdict("q", "draft", retrieved=False, correct=False, wrong_with_retrieval=False)
    assert wrong.helps == 1.0 and wrong.feedback().label == UNKNOWN
    both_wrong = verdict("q", "draft", retrieved=False, correct=False, wrong_with_retrieval=True)
    assert both_wrong.helps is None and both_wrong.feedback().label is None
    with_retrieval = verdict("q", "draft", retrieved=True, correct=False, wrong_with_retrieval=False)
    assert with_retrieval.helps is None and with_retrieval.answer is None
    feedback = with_retrieval.feedback()
    assert (feedback.question, feedback.retrieved, feedback.correct) == ("q", True, False)
    with pytest.raises(ValueError, match="only a verdict"):
        pair("q", "d", "a", "shadow", 1.0).feedback()


def test_same_question_ignores_case_punctuation_and_articles():
    assert same_question("Who wrote The Hamlet?") == same_question("who wrote hamlet")
    assert same_question("Who wrote Hamlet?") != same_question("Who wrote Macbeth?")


def test_teaching_lets_the_latest_labelled_verdict_outrank_the_pairs():
    entries = [
        pair("Who wrote Hamlet?", "Marlowe", "Shakespeare", "retrieved", 1.0),  # 0: outranked by verdict 3
        pair("Capital of France?", "Paris", "Paris", "shadow", 0.5),  # 1: kept
        verdict("who wrote hamlet", "Marlowe", False, False, False),  # 2: replaced by 3
        verdict("Who wrote Hamlet", "Marlowe", False, True, False),  # 3: the latest verdict
        verdict("Capital of France?", "Paris", True, True, False),  # 4: no label, teaches nothing
    ]
    np.testing.assert_array_equal(teaching(entries), [False, True, False, True, False])


@pytest.fixture(scope="module")
def fitted(outcome_records):
    """A draft-check style combiner fitted on real records' features (question and answer lengths)."""
    records = outcome_records[:120]
    features = np.array(
        [[len(r.question.split()), len(r.pred_no_retrieval.split()), len(r.answers)] for r in records], float
    )
    helps = agreement_helps(records)
    a = np.zeros(len(records))
    combiner = fit_feature_combiner(
        features, ("words", "draft_words", "golds"), a, helps, target="helps", model="logistic"
    )
    return records, features, helps, combiner


def test_fit_rows_round_trip_and_are_checked(fitted, tmp_path):
    _, features, helps, _ = fitted
    rows = FitRows(features, None, helps)
    assert len(rows) == 120
    state = rows.save(tmp_path)
    assert state == {"size": 120, "embeddings": False}
    loaded = FitRows.load(tmp_path, state, n_features=3, width=None)
    np.testing.assert_array_equal(loaded.features, features)
    np.testing.assert_array_equal(loaded.helps, helps)
    with pytest.raises(GateLoadError, match=r"'state.fit_rows.embeddings' does not match"):
        FitRows.load(tmp_path, state, n_features=3, width=8)
    with pytest.raises(GateLoadError, match=r"must hold \(120, 4\) finite floats"):
        FitRows.load(tmp_path, state, n_features=4, width=None)
    with pytest.raises(GateLoadError, match=r"'state.fit_rows.size' is missing"):
        FitRows.load(tmp_path, {"size": True}, n_features=3, width=None)
    FitRows(features, None, helps * 2).save(tmp_path)
    with pytest.raises(GateLoadError, match="0 or 1 per row"):
        FitRows.load(tmp_path, state, n_features=3, width=None)
    embedded = FitRows(features, np.ones((120, 4)), helps)
    state = embedded.save(tmp_path)
    assert FitRows.load(tmp_path, state, 3, 4).embeddings.shape == (120, 4)


def test_the_log_appends_removes_and_finds_verdicts():
    log = ShadowLog(n_features=2, width=None)
    first = pair("Who wrote Hamlet?", "Marlowe", "Shakespeare", "retrieved", 1.0)
    judged = verdict("Who wrote Hamlet?", "Marlowe", retrieved=True, correct=False, wrong_with_retrieval=False)
    log.append(first, [1.0, 2.0], None)
    log.append(judged, np.array([3.0, 4.0]), None)
    assert len(log) == 2 and log.entries() == [first, judged]
    entries, features, embeddings = log.rows()
    assert entries == [first, judged]
    np.testing.assert_array_equal(features, [[1, 2], [3, 4]])
    assert embeddings is None
    assert log.wrong_with_retrieval("who wrote hamlet")
    assert not log.wrong_with_retrieval("Who wrote Macbeth?")
    with pytest.raises(ValueError, match="expected 2 features, got 3"):
        log.append(first, [1.0, 2.0, 3.0], None)
    with pytest.raises(ValueError, match="an embedding goes with"):
        log.append(first, [1.0, 2.0], np.ones(4))
    log.learned = 1
    assert log.position(Observation(**first.__dict__)) == 0  # an equal one is found too
    assert log.remove(first) is True and log.learned == 0
    assert log.remove(judged) is False
    with pytest.raises(ValueError, match="holds no observation"):
        log.remove(judged)


def test_the_log_round_trips_through_files(tmp_path):
    log = ShadowLog(n_features=2, width=3, metric="contains")
    log.append(pair("Q one?", "a", "b", "shadow", 0.2), [1.0, 2.0], np.ones(3))
    log.append(verdict("Q two?", "x", False, True, False), [0.5, 0.5], np.zeros(3))
    log.learned, log.refits = 2, 1
    state = log.save(tmp_path)
    assert state == {"file": LOG_FILE, "size": 2, "metric": "contains", "learned": 2, "refits": 1}
    lines = (tmp_path / LOG_FILE).read_text().splitlines()
    assert json.loads(lines[0])["source"] == "shadow"
    loaded = ShadowLog.load(tmp_path, state, n_features=2, width=3)
    assert loaded.entries() == log.entries()
    assert (loaded.learned, loaded.refits) == (2, 1)
    np.testing.assert_array_equal(loaded.rows()[2], log.rows()[2])
    (tmp_path / "empty").mkdir()
    empty = ShadowLog(2, None).save(tmp_path / "empty")
    assert ShadowLog.load(tmp_path / "empty", empty, 2, None).entries() == []


@pytest.mark.parametrize("breaker", LINE_BREAKS_LEFT_RAW)
def test_a_question_holding_a_line_separator_round_trips(tmp_path, breaker):
    log = ShadowLog(n_features=1, width=None)
    log.append(pair(f"Q{breaker}one?", "a", "b", "shadow", 0.2), [1.0], None)
    log.append(verdict(f"Q two?{breaker}", f"x{breaker}", False, True, False), [0.5], None)
    state = log.save(tmp_path)
    assert len((tmp_path / LOG_FILE).read_text(encoding="utf-8").splitlines()) == 2
    assert ShadowLog.load(tmp_path, state, n_features=1, width=None).entries() == log.entries()
    # a log written before the separators were escaped holds them raw: it reads too
    raw = "".join(json.dumps(asdict(e), ensure_ascii=False) + "\n" for e in log.entries())
    (tmp_path / LOG_FILE).write_text(raw, encoding="utf-8")
    assert ShadowLog.load(tmp_path, state, n_features=1, width=None).entries() == log.entries()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s, lines: (s | {"file": "other.jsonl"}, lines), "'state.shadow' is malformed"),
        (lambda s, lines: (s | {"learned": 5}, lines), "learned <= size"),
        (lambda s, lines: (s | {"metric": None}, lines), "must name a metric"),
        (lambda s, lines: (s | {"size": 1, "learned": 0}, lines), "holds 2 observations"),
        (lambda s, lines: (s, ["{not json", lines[1]]), "line 1: not readable JSON"),
        (lambda s, lines: (s, [lines[0].replace('"source": "shadow"', '"source": "guess"'), lines[1]]), "wrong type"),
        (lambda s, lines: (s, [lines[0].replace('"probability": 0.2', '"probability": 0'), lines[1]]), "wrong type"),
        (lambda s, lines: (s, [lines[0], lines[1].replace('"answer": null', '"answer": "x"')]), "line 2: a field"),
        (lambda s, lines: (s, [json.dumps({"question": "q"}), lines[1]]), "expected the fields"),
    ],
)
def test_a_bad_log_is_refused(tmp_path, change, message):
    log = ShadowLog(n_features=1, width=None)
    log.append(pair("Q one?", "a", "b", "shadow", 0.2), [1.0], None)
    log.append(verdict("Q two?", "x", False, True, False), [0.5], None)
    state, lines = change(log.save(tmp_path), (tmp_path / LOG_FILE).read_text().splitlines())
    (tmp_path / LOG_FILE).write_text("\n".join(lines) + "\n")
    with pytest.raises(GateLoadError, match=message):
        ShadowLog.load(tmp_path, state, n_features=1, width=None)


def test_refit_learns_from_fit_rows_and_weighted_observations(fitted):
    records, features, helps, combiner = fitted
    # observations: the last 20 records' pairs, shadows observed at rate 0.5
    entries = [
        pair(
            r.question,
            r.pred_no_retrieval,
            r.pred_one_retrieval,
            "shadow" if i % 2 else "retrieved",
            0.5 if i % 2 else 1.0,
        )
        for i, r in enumerate(records[100:])
    ]
    result = refit(combiner, FitRows(features[:100], None, helps[:100]), entries, features[100:], None, C=0.05)
    assert isinstance(result, Refit)
    assert result.fit_rows == 100 and result.used == 20
    assert np.isfinite(result.threshold)
    assert not np.allclose(result.combiner.score(features), combiner.score(features))


def test_refit_without_fit_rows_needs_enough_observations_with_both_labels(fitted):
    records, features, _, combiner = fitted
    entries = [pair(r.question, r.pred_no_retrieval, r.pred_one_retrieval, "retrieved", 1.0) for r in records]
    few = refit(combiner, None, entries[: MIN_ROWS - 1], features[: MIN_ROWS - 1], None, C=0.05)
    assert few is None
    alike = [pair(f"Question {i}?", "same", "same", "retrieved", 1.0) for i in range(MIN_ROWS + 5)]
    assert refit(combiner, None, alike, features[: len(alike)], None, C=0.05) is None
    enough = refit(combiner, None, entries[:60], features[:60], None, C=0.05)
    assert enough is not None and enough.fit_rows == 0 and enough.used == 60
