"""The certainty parser on a table of real-looking replies and on generated text; the
word-choice probabilities that grade the prompt gates' scores."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adaptive_gates.models.chat.base import TokenLogprob
from adaptive_gates.signals import certainty
from adaptive_gates.signals.certainty import (
    CERTAIN,
    UNCERTAIN,
    clean_reply_answer,
    marker_uncertain_probability,
    parse_certainty,
    uncertain_share,
)
from adaptive_gates.signals.word_choice import STATED_WORD_THRESHOLD, graded_need, spells, word_share, word_start_token

# (reply, certainty, answer)
TABLE = [
    ("Paris, certain.", CERTAIN, "Paris"),
    ("Paris (uncertain)", UNCERTAIN, "Paris"),
    ("William Shakespeare. Certain", CERTAIN, "William Shakespeare"),
    # A factual no / false is an answer, not doubt (the authors' parser calls both uncertain).
    ("No. Certain.", CERTAIN, "No"),
    ("No", None, "No"),
    ("False, certain", CERTAIN, "False"),
    ("False, uncertain", UNCERTAIN, "False"),
    ("I am certain that the answer is Paris.", CERTAIN, "Paris"),
    ("Paris. I am not certain.", UNCERTAIN, "Paris"),
    ("Lyon, but I'm not very certain", UNCERTAIN, "Lyon, but"),
    ("Unsure. Maybe Lyon", UNCERTAIN, "Maybe Lyon"),
    ("1. Paris\n2. certain", CERTAIN, "Paris"),
    ("Answer: Paris\nCertainty: uncertain", UNCERTAIN, "Paris"),
    # Not markers: other words that contain or resemble them.
    ("Certainly Paris", None, "Certainly Paris"),
    ("There is some uncertainty: Paris", None, "There is some uncertainty: Paris"),
    ("A certain amount of water", None, "A certain amount of water"),
    # Nothing is cut inside a word.
    ("Uncertainty principle, certain", CERTAIN, "Uncertainty principle"),
    ("Ascertained facts, uncertain", UNCERTAIN, "Ascertained facts"),
    # The last marker wins.
    ("Certain: Paris. On reflection, uncertain.", UNCERTAIN, "Paris. On reflection"),
    # Refusals without a marker are uncertain and carry no answer.
    ("I don't know.", UNCERTAIN, ""),
    ("I'm sorry, I cannot answer that.", UNCERTAIN, ""),
    # Another language: no English marker, so no certainty (the judgement prompt follows).
    ("París, seguro.", None, "París, seguro"),
    # A foreign clause around an English marker word stays in the answer (only English
    # filler words leave with the marker); "contains answer" still finds the answer.
    ("Paris. Je suis certain.", CERTAIN, "Paris. Je suis"),
    ("uncertain", UNCERTAIN, ""),
]


@pytest.mark.parametrize(("reply", "certainty", "answer"), TABLE)
def test_table(reply: str, certainty: str | None, answer: str) -> None:
    parse = parse_certainty(reply)
    assert parse.certainty == certainty
    assert parse.answer == answer


def test_refusal_and_marker_sources() -> None:
    assert parse_certainty("I don't know").source == "refusal"
    assert parse_certainty("Paris, certain").source == "marker"
    assert parse_certainty("Paris").source == "none"
    assert parse_certainty("Paris").uncertain is None
    assert parse_certainty("Paris, uncertain").uncertain is True


def test_rejects_non_text() -> None:
    with pytest.raises(ValueError, match="reply must be a str"):
        parse_certainty(None)  # type: ignore[arg-type]


words = st.text(alphabet=st.characters(categories=("L", "N")), min_size=1, max_size=12)
# Answers made of words that are neither markers nor the words a marker's clause takes along.
_CLAUSE_WORDS = {"certain", "uncertain", "unsure", "not", "never", *certainty._CLAUSE_FILLER, *certainty._RIGHT_FILLER}
answers = (
    st.lists(words, min_size=1, max_size=6)
    .map(" ".join)
    .filter(lambda a: not any(w.lower() in _CLAUSE_WORDS for w in a.split()) and parse_certainty(a).certainty is None)
)


@settings(max_examples=200, deadline=None)
@given(
    answer=answers,
    marker=st.sampled_from(["certain", "uncertain", "Certain", "UNCERTAIN"]),
    separator=st.sampled_from([", ", ". ", " (", "\n", " - "]),
)
def test_generated_answer_then_marker(answer: str, marker: str, separator: str) -> None:
    parse = parse_certainty(f"{answer}{separator}{marker}")
    assert parse.certainty == marker.lower()
    assert parse.answer == answer  # removing the marker cuts nothing from the answer


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80))
def test_any_text_parses_without_error(text: str) -> None:
    parse = parse_certainty(text)
    assert parse.certainty in (None, CERTAIN, UNCERTAIN)
    if parse.span is not None:
        start, end = parse.span
        assert 0 <= start < end <= len(text)


def _tokens(*pieces: tuple[str, float, tuple[tuple[str, float], ...]]) -> tuple[TokenLogprob, ...]:
    return tuple(TokenLogprob(token, logprob, top) for token, logprob, top in pieces)


def test_graded_probability_at_the_marker() -> None:
    reply = "Paris, certain"
    tokens = _tokens(
        ("Paris", -0.1, ()),
        (",", -0.2, ()),
        (" certain", math.log(0.6), ((" certain", math.log(0.6)), (" unc", math.log(0.2)), (" maybe", math.log(0.1)))),
    )
    p = marker_uncertain_probability(reply, parse_certainty(reply), tokens)
    assert p == pytest.approx(0.2 / 0.8)


def test_graded_probability_is_none_without_tokens_or_for_negations() -> None:
    assert marker_uncertain_probability("Paris, certain", parse_certainty("Paris, certain"), None) is None
    reply = "Paris, not certain"
    tokens = _tokens(("Paris", -0.1, ()), (",", -0.1, ()), (" not", -0.5, ()), (" certain", -0.1, ()))
    assert marker_uncertain_probability(reply, parse_certainty(reply), tokens) is None


def test_graded_probability_needs_the_marker_chosen_at_one_token() -> None:
    """ " c" + "ertain": no single position chose between the two words."""
    reply = "Paris, certain"
    tokens = _tokens(
        ("Paris", -0.1, ()), (",", -0.1, ()), (" c", -0.1, ((" c", -0.1), (" unc", -3.0))), ("ertain", -0.1, ())
    )
    assert marker_uncertain_probability(reply, parse_certainty(reply), tokens) is None


def _position(*alternatives: tuple[str, float]) -> TokenLogprob:
    """A position whose chosen token is the first alternative (probabilities, not logs)."""
    return TokenLogprob(
        alternatives[0][0], math.log(alternatives[0][1]), tuple((t, math.log(p)) for t, p in alternatives)
    )


def test_uncertain_share_needs_two_letters() -> None:
    assert uncertain_share(_position(("The", 0.5), ("C", 0.3))) is None
    assert uncertain_share(_position(("The", 0.5), ("Un", 0.3), ("Cert", 0.1))) == pytest.approx(0.75)
    assert uncertain_share(_position(("The", 0.5), ("unsure", 0.1), ("certain", 0.1))) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("No", True),
        (" no", True),
        ("No,", True),
        ("NO.", True),
        ("Ye", True),
        (" Yes!", True),
        ("N", False),
        ("Y", False),
        ("Not", False),
        ("None", False),
        ("Yesterday", False),
        ("", False),
    ],
)
def test_one_matching_rule_for_polar_words(text: str, counts: bool) -> None:
    """A spelling is the word or a prefix of it of two or more letters, whatever its case,
    spaces and punctuation; a longer word is another word."""
    assert spells(text, ("yes", "no")) is counts


def test_word_share_adds_up_every_spelling_of_each_side() -> None:
    position = _position(("No", 0.4), ("Yes", 0.35), (" yes", 0.25), ("Maybe", 0.1))
    assert word_share(position, ("yes",), ("no",)) == pytest.approx(0.6 / 1.0)
    assert word_share(position, ("no",), ("yes",)) == pytest.approx(0.4 / 1.0)
    assert word_share(_position(("Maybe", 0.9), ("Perhaps", 0.1)), ("yes",), ("no",)) is None


def test_word_share_reads_the_chosen_token_when_there_are_no_alternatives() -> None:
    assert word_share(TokenLogprob(" No", -0.1), ("yes",), ("no",)) == 0.0
    assert word_share(TokenLogprob(" certain", -0.1), ("uncertain", "unsure"), ("certain",)) == 0.0


def test_an_alternative_that_fits_both_sides_counts_for_neither() -> None:
    position = _position(("un", 0.5), ("unsure", 0.2), ("unknown", 0.3))
    assert word_share(position, ("unsure",), ("unknown",)) == pytest.approx(0.2 / 0.5)  # "un" is left out


def test_word_start_token_wants_the_token_that_chose_the_word() -> None:
    tokens = (TokenLogprob("A", -0.1), TokenLogprob(":", -0.1), TokenLogprob(" No", -0.1), TokenLogprob(",", -0.1))
    assert word_start_token(tokens, 3, "no") == 2
    split = (TokenLogprob(" N", -0.1), TokenLogprob("o", -0.1))
    assert word_start_token(split, 1, "no") is None  # "N" alone chose no word
    assert word_start_token(tokens, 40, "no") is None


@pytest.mark.parametrize(
    ("retrieve", "p_retrieve", "score"),
    [(False, None, 0.0), (True, None, 1.0), (False, 0.2, 0.2), (True, 0.8, 0.8), (False, 0.6, 0.5)],
)
def test_graded_need_keeps_the_stated_side(retrieve: bool, p_retrieve: float | None, score: float) -> None:
    assert graded_need(retrieve, p_retrieve) == score


@settings(max_examples=200, deadline=None)
@given(retrieve=st.booleans(), p_retrieve=st.none() | st.floats(0.0, 1.0))
def test_the_default_threshold_is_the_stated_word(retrieve: bool, p_retrieve: float | None) -> None:
    assert (graded_need(retrieve, p_retrieve) > STATED_WORD_THRESHOLD) is retrieve


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("0.", "0"),
        ("1. Paris", "Paris"),
        ("1.Paris", "Paris"),
        ("1.5 million", "1.5 million"),
        ("- Paris", "Paris"),
        ("Answer: 2017.", "2017"),
        ("\n\n  The answer is Lyon\nmore", "Lyon"),
    ],
)
def test_answer_cleaning_keeps_numbers_that_are_answers(text: str, answer: str) -> None:
    assert clean_reply_answer(text) == answer
