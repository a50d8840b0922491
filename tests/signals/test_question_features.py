"""Cheap features of a question's wording, one named column each."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaptive_gates.records.data import load_corpus
from adaptive_gates.signals.question_features import (
    FEATURE_NAMES,
    features_of,
    question_features,
    question_opening,
)
from adaptive_gates.signals.word_rarity import TOP_ZIPF, WordRarity


def _opening(question):
    return [name for name, value in question_opening(question.lower().split()).items() if value]


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("who wrote hamlet", ["wh_who"]),
        ("how many moons has mars", ["wh_count"]),
        ("how much does it cost", ["wh_count"]),
        ("how old is the earth", ["wh_how"]),
        ("is paris in france", ["wh_yes_no"]),
        ("did napoleon win", ["wh_yes_no"]),
        ("in which year did the war end", ["wh_which"]),
        ("name the capital of peru", []),
        ("", []),
    ],
)
def test_the_opening_decides_the_kind(question, kind):
    assert _opening(question) == kind


def test_features_of_one_question():
    rarity = WordRarity()
    question = "When was the director of the film Jaws born, and how many Oscars did he win in 1976?"
    values = features_of(question, rarity)
    assert list(values) == list(FEATURE_NAMES)
    assert values["wh_when"] == 1.0
    assert values["cue_time"] == values["cue_count"] == values["cue_bridge"] == 1.0
    assert values["cue_compare"] == 0.0
    assert values["n_spans"] == 2.0  # "Jaws", "Oscars"
    assert values["n_numbers"] == 1.0
    assert values["log_words"] == pytest.approx(math.log1p(18))
    rated = rarity.rate(question)
    assert values["rarity_min"] == pytest.approx(TOP_ZIPF - rated.min_zipf)
    assert values["rarity_total"] == pytest.approx(sum(TOP_ZIPF - z for z in rated.content_zipfs))


def test_a_question_without_content_words_is_as_common_as_can_be():
    values = features_of("Who is he?", WordRarity())
    assert values["rarity_min"] == values["rarity_mean"] == values["rarity_span"] == 0.0
    assert values["n_rare"] == values["n_unknown"] == values["rarity_total"] == 0.0


def test_rarer_wording_scores_rarer():
    rarity = WordRarity()
    common = features_of("What is the capital of France?", rarity)
    rare = features_of("What is the capital of Tuvalu's Funafuti atoll?", rarity)
    assert rare["rarity_min"] > common["rarity_min"]
    assert rare["n_rare"] > common["n_rare"]


def test_the_matrix_of_real_questions(qa_records):
    questions = [r.question for r in qa_records[:40]]
    matrix = question_features(questions)
    assert matrix.shape == (40, len(FEATURE_NAMES))
    assert matrix.dtype == np.float64
    assert np.isfinite(matrix).all()
    assert (matrix >= 0).all()
    assert matrix[:, FEATURE_NAMES.index("log_words")].min() > 0
    wh = [FEATURE_NAMES.index(n) for n in FEATURE_NAMES if n.startswith("wh_")]
    assert (matrix[:, wh].sum(axis=1) <= 1).all()  # one kind at most
    np.testing.assert_array_equal(matrix[3], [features_of(questions[3], WordRarity())[n] for n in FEATURE_NAMES])


def test_no_questions_give_an_empty_matrix_of_the_right_width():
    assert question_features([]).shape == (0, len(FEATURE_NAMES))


def test_a_corpus_changes_the_rarity_columns_only(corpus_path):
    question = ["Which river flows through the city of Funafuti?"]
    plain = question_features(question)
    blended = question_features(question, WordRarity.from_texts(p.text for p in load_corpus(corpus_path)))
    rarity_columns = [i for i, n in enumerate(FEATURE_NAMES) if "rar" in n or n == "n_unknown"]
    other = [i for i in range(len(FEATURE_NAMES)) if i not in rarity_columns]
    np.testing.assert_array_equal(plain[:, other], blended[:, other])
    assert not np.array_equal(plain[:, rarity_columns], blended[:, rarity_columns])
