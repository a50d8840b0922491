"""The input checks shared by gates and backends."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.errors import InvalidQuestionError
from adaptive_gates.records.validation import (
    MAX_CONCURRENCY,
    MAX_EMBEDDING_DIMS,
    MAX_NEW_TOKENS,
    MAX_QUESTION_CHARS,
    MAX_SAMPLES,
    MAX_SECONDS,
    check_base_url,
    check_batch,
    check_count,
    check_encodable,
    check_labels,
    check_outcomes,
    check_positive,
    check_question,
    check_questions,
    check_sampling,
    check_seconds,
    check_stops,
    check_text,
    is_invisible,
)


def test_a_question_is_stripped_and_bounded(qa_records):
    question = qa_records[0].question
    assert check_question(f"  {question}\n") == question
    assert check_question("x" * (MAX_QUESTION_CHARS + 500)) == "x" * MAX_QUESTION_CHARS
    assert check_question("\u200bwho?") == "\u200bwho?"  # a visible character is enough


@pytest.mark.parametrize(
    ("question", "message"),
    [
        (None, "a question must be a str, got NoneType"),
        (b"who?", "a question must be a str, got bytes"),
        ("", "must not be empty or whitespace"),
        (" \t\n", "must not be empty or whitespace"),
        ("\u200b\u200d\ufeff", r"only invisible ones \(U\+200B U\+200D U\+FEFF\)"),
        ("\x00" * 10, r"\(U\+0000 U\+0000 U\+0000 U\+0000 U\+0000 U\+0000 and 4 more\)"),
        ("\ufe0f\u3164", "only invisible ones"),
        ("who\ud800?", r"cannot be encoded as UTF-8: surrogates not allowed '\\ud800' at position 3"),
    ],
)
def test_a_bad_question_is_refused_with_its_reason(question, message):
    with pytest.raises(InvalidQuestionError, match=message):
        check_question(question)


def test_invisible_characters():
    assert all(is_invisible(c) for c in [" ", "\x00", "\u200b", "\u2028", "\u034f", "\U000e0041", "\u00a0"])
    assert not any(is_invisible(c) for c in ["a", "é", "?", "\u0301", "中"])


def test_a_batch_is_a_sequence_not_a_string_or_mapping(qa_records):
    questions = [r.question for r in qa_records[:3]]
    assert check_batch(q for q in questions) == questions
    assert check_questions(questions) == questions
    for bad, name in [("who?", "single string"), (b"x", "single string"), ({"q": 1}, "dict"), (None, "NoneType")]:
        with pytest.raises(InvalidQuestionError, match=name):
            check_batch(bad)


def test_the_first_bad_question_of_a_batch_is_named_by_position():
    with pytest.raises(InvalidQuestionError, match=r"^question 2: a question must not be empty"):
        check_questions(["who?", "what?", "  ", 3])


def test_check_encodable_names_what():
    check_encodable("Grüße", "a passage")
    with pytest.raises(InvalidQuestionError, match=r"^a passage cannot be encoded"):
        check_encodable("\udcff", "a passage")


def test_outcomes_are_zero_one_or_graded_scores():
    values = check_outcomes([0, 1, True, 0.5, np.float32(0.25), np.int64(1), np.bool_(False)], "correct")
    assert values.dtype == np.float64
    assert values.tolist() == [0.0, 1.0, 1.0, 0.5, 0.25, 1.0, 0.0]
    for bad, index in [([0, 2], 1), ([float("nan")], 0), ([1, -1], 1), (["1"], 0), ([None], 0)]:
        with pytest.raises(ValueError, match=rf"^correct\[{index}\] must be 0/1"):
            check_outcomes(bad, "correct")
    for bad in ["01", 3, None]:
        with pytest.raises(ValueError, match="must be a sequence of outcomes"):
            check_outcomes(bad, "correct")


def test_labels_are_binary_and_one_per_question():
    assert check_labels([0, 1, True, False, np.int64(1), 1.0], 6) == [0, 1, 1, 0, 1, 1]
    with pytest.raises(ValueError, match="got 2 labels for 3 questions"):
        check_labels([0, 1], 3)
    with pytest.raises(ValueError, match="label 1 must be 0/1 or bool, got 2"):
        check_labels([0, 2], 2)
    with pytest.raises(ValueError, match="label 0 must be 0/1 or bool, got '1'"):
        check_labels(["1"], 1)


def test_text_and_positive_ints():
    check_text("a passage", "text")
    for bad, message in [(None, "text must be a str, got NoneType"), (" ", "text must not be empty")]:
        with pytest.raises(ValueError, match=message):
            check_text(bad, "text")
    check_positive(1, "k")
    for bad in [0, -3, 2.0, "2", None, True]:
        with pytest.raises(ValueError, match="k must be a positive int"):
            check_positive(bad, "k")


def test_counts_and_seconds_with_an_upper_bound():
    assert (MAX_SAMPLES, MAX_NEW_TOKENS, MAX_CONCURRENCY, MAX_EMBEDDING_DIMS, MAX_SECONDS) == (
        64,
        32768,
        256,
        65536,
        86400.0,
    )
    check_count(5, "n", 5)
    with pytest.raises(ValueError, match="n must be at most 5, got 6"):
        check_count(6, "n", 5)
    with pytest.raises(ValueError, match="n must be a positive int"):
        check_count(0, "n", 5)
    assert check_seconds(86400, "timeout") == 86400.0 and check_seconds(0.25, "timeout") == 0.25
    for bad in (0, -1, 86400.001, 1e308, float("inf"), float("nan"), True, "30"):
        with pytest.raises(ValueError, match=r"timeout must be a positive number of seconds, at most 86400"):
            check_seconds(bad, "timeout")


def test_stops():
    assert check_stops(None) == []
    assert check_stops("\n") == ["\n"]
    assert check_stops(("a", "b")) == ["a", "b"]
    for bad in [[""], ["a", None], ""]:
        with pytest.raises(ValueError, match="stop strings must be non-empty strings"):
            check_stops(bad)


def test_sampling_settings():
    check_sampling(k=3, temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=16)
    for settings, message in [
        ({"k": 0}, "k must be a positive int"),
        ({"k": True}, "k must be a positive int"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive int"),
        ({"k": 65}, "k must be at most 64, got 65"),
        ({"max_new_tokens": 32769}, "max_new_tokens must be at most 32768, got 32769"),
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"temperature": float("nan")}, "temperature must be > 0"),
        ({"top_k": -1}, "top_k must be an int >= 0"),
        ({"top_k": True}, "top_k must be an int >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
    ]:
        base = {"k": 3, "temperature": 0.7, "top_k": 50, "top_p": 0.9, "max_new_tokens": 16}
        with pytest.raises(ValueError, match=message):
            check_sampling(**{**base, **settings})


@pytest.mark.parametrize("url", ["http://localhost:8000/v1", "https://api.example.com", "http://[::1]:8080/v1"])
def test_a_usable_base_url_is_returned(url):
    assert check_base_url(url) == url


@pytest.mark.parametrize(
    "url", ["not a url", "localhost:8000/v1", "ftp://host/v1", "http://", "http://host:port/v1", None, 8000]
)
def test_an_unusable_base_url_is_refused(url):
    with pytest.raises(ValueError, match="is not an http\\(s\\) URL with a host"):
        check_base_url(url)
