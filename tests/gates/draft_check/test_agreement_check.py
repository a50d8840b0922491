"""Whether the draft-check combiner reads agreement, decided on the user's records."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from adaptive_gates.gates.combiner.features import fit_feature_combiner
from adaptive_gates.gates.draft_check.agreement_check import (
    AGREEMENT_COLUMNS,
    MIN_AGREEMENT_RECORDS,
    AgreementCheck,
    check_agreement,
    gap_capture_of,
    without_agreement,
)
from adaptive_gates.records.answer_metrics import normalize_answer
from adaptive_gates.records.selfknowledge import outcome_scores

COLUMNS = ("question_words", *AGREEMENT_COLUMNS)


def fit(x, columns, a, b, embeddings):
    return fit_feature_combiner(x, columns, a, b, embeddings=embeddings, model="logistic")


@pytest.fixture(scope="module")
def outcomes(outcome_records):
    records = outcome_records[:150]
    a, b = outcome_scores(records, "contains")
    # whether the two answers agree: when they do, retrieving changes nothing
    agree = np.array(
        [normalize_answer(r.pred_no_retrieval) == normalize_answer(r.pred_one_retrieval) for r in records], float
    )
    words = np.array([len(r.question.split()) for r in records], float)
    return records, a, b, agree, words


def test_without_agreement_drops_only_the_agreement_columns():
    assert without_agreement(COLUMNS) == ("question_words",)
    assert without_agreement(("a", "agree_top", "b")) == ("a", "b")


def test_gap_capture_is_one_for_the_oracle_and_zero_for_constant_scores(outcomes):
    _, a, b, _, _ = outcomes
    assert gap_capture_of(b - a, a, b) == pytest.approx(1.0)
    assert gap_capture_of(np.zeros(len(a)), a, b) == pytest.approx(0.0)
    assert gap_capture_of(a - b, a, b) < 0
    same = np.ones(10)
    assert gap_capture_of(np.arange(10.0), same, same) == 0.0  # no room above random


def test_informative_agreement_is_kept(outcomes, caplog):
    _, a, b, agree, words = outcomes
    features = np.c_[words, agree, agree, agree * 0.5, agree]
    with caplog.at_level(logging.INFO, logger="adaptive_gates.gates.draft_check.agreement_check"):
        check = check_agreement(fit, features, COLUMNS, a, b, None)
    assert check.used is True
    assert check.with_agreement > check.without_agreement
    assert "raises the out-of-fold gap capture" in check.reason and "3 folds of 150 records" in check.reason
    assert "agreement columns are used" in caplog.text


def test_noise_in_the_agreement_columns_is_left_out(outcomes):
    _, a, b, agree, words = outcomes
    noise = np.random.default_rng(0).normal(size=(len(a), 4))
    # the informative column is not an agreement one here: agreement adds only noise
    features = np.c_[agree + 0.01 * words, noise]
    check = check_agreement(fit, features, COLUMNS, a, b, None)
    assert check.used is False
    assert check.with_agreement <= check.without_agreement
    assert "does not raise" in check.reason


def test_too_few_records_leave_agreement_out_without_fitting(outcomes):
    _, a, b, agree, words = outcomes
    n = MIN_AGREEMENT_RECORDS - 1

    def never(*args):
        raise AssertionError("no combiner is fitted on too few records")

    check = check_agreement(never, np.c_[words, agree, agree, agree, agree][:n], COLUMNS, a[:n], b[:n], None)
    assert check == AgreementCheck(False, check.reason)
    assert f"{n} records are too few" in check.reason


def test_the_check_round_trips_and_bad_objects_are_refused():
    check = AgreementCheck(True, "it helps", 0.4, 0.3)
    assert AgreementCheck.from_dict(check.to_dict()) == check
    assert check.to_dict()["gap_capture_with"] == 0.4
    bare = AgreementCheck(False, "agreement='never'")
    assert AgreementCheck.from_dict(bare.to_dict()) == bare
    for bad in (
        None,
        {"used": "yes"},
        {"used": True, "reason": 3},
        {"used": True, "reason": "r", "gap_capture_with": True},
    ):
        with pytest.raises(ValueError):
            AgreementCheck.from_dict(bad)
