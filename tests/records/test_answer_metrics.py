import pytest

from adaptive_gates.records.answer_metrics import (
    contains_answer,
    exact_match,
    extract_after_answer_is,
    extract_seakr_answer,
    first_line,
    get_metric,
    normalize_answer,
    token_f1,
)


@pytest.mark.parametrize(
    "text, punctuation, expected",
    [
        ("The  Eiffel Tower!", "delete", "eiffel tower"),
        ("Jean-Paul Sartre", "delete", "jeanpaul sartre"),
        ("Jean-Paul Sartre", "space", "jean paul sartre"),
        ("An apple a day", "delete", "apple day"),
    ],
)
def test_normalize_answer(text, punctuation, expected):
    assert normalize_answer(text, punctuation) == expected


def test_normalize_unifies_composed_and_decomposed_accents():
    composed, decomposed = "Th\u00e9\u00e2tre", "The\u0301a\u0302tre"
    assert normalize_answer(composed) == normalize_answer(decomposed)
    assert exact_match(composed, [decomposed]) == 1.0


def test_normalize_rejects_unknown_mode():
    with pytest.raises(ValueError, match="punctuation"):
        normalize_answer("x", "drop")  # type: ignore[arg-type]


def test_exact_match_takes_max_over_golds():
    assert exact_match("the Beatles", ["Rolling Stones", "Beatles"]) == 1.0
    assert exact_match("Beatles band", ["Beatles"]) == 0.0


def test_token_f1_known_value():
    # pred tokens {barack, obama}, gold {obama}: P=1/2, R=1 -> F1=2/3
    assert token_f1("Barack Obama", ["Obama"]) == pytest.approx(2 / 3)
    assert token_f1("nothing shared", ["Obama"]) == 0.0


def test_token_f1_yes_no_guard():
    assert token_f1("yes", ["no"]) == 0.0
    # A yes/no gold must be matched exactly: partial overlap earns nothing.
    assert token_f1("no it is not", ["no"]) == 0.0
    assert token_f1("yes", ["yes"]) == 1.0


def test_contains_answer_whole_tokens_only():
    assert contains_answer("It was written by William Shakespeare.", ["Shakespeare"]) == 1.0
    assert contains_answer("The Parisian style", ["Paris"]) == 0.0
    assert contains_answer("New York City", ["new york"]) == 1.0
    assert contains_answer("York New", ["new york"]) == 0.0
    assert contains_answer("anything", [""]) == 0.0


def test_get_metric():
    assert get_metric("em") is exact_match
    with pytest.raises(ValueError, match="unknown metric"):
        get_metric("bleu")


def test_first_line_is_the_first_line_left_non_empty_by_the_cleaner():
    assert first_line("\n  \n Paris \nRome") == "Paris"
    assert first_line("1.\nRome", lambda line: line.strip().removesuffix("1.")) == "Rome"
    assert first_line("") == "" and first_line(" \n\t") == ""


def test_answer_extraction_helpers():
    assert extract_after_answer_is("Reasoning... So the answer is Paris.\nMore") == "Paris"
    assert extract_after_answer_is("Paris") == "Paris"
    assert extract_seakr_answer("He was born in 1950. So the answer is 1950.") == "1950"
    assert extract_seakr_answer("So the answer is: Rome, Italy.") == "rome"
    assert extract_seakr_answer("Berlin is the answer") == "berlin"
    assert extract_seakr_answer("no pattern here") is None
