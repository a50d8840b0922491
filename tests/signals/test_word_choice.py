"""How strongly a model chose a stated word, and the need score graded by it."""

from __future__ import annotations

import math

import pytest

from adaptive_gates.records.token_logprobs import TokenLogprob
from adaptive_gates.signals.word_choice import (
    STATED_WORD_THRESHOLD,
    graded_need,
    spells,
    word_share,
    word_start_token,
)

YES, NO = ("yes",), ("no",)


def _t(token, p, *top):
    return TokenLogprob(token, math.log(p), tuple((alt, math.log(q)) for alt, q in top))


def test_spells_takes_the_word_or_a_prefix_of_two_letters():
    assert all(spells(t, NO) for t in ["No", " no,", "NO.", "\nNo!"])
    assert spells("Ye", YES) and spells("Unc", ("uncertain",))
    assert not any(spells(t, NO) for t in ["N", "Not", "nope", "", " ,"])
    assert not spells("certainly", ("certain",))
    assert spells("cert", ("certain", "uncertain"))


def test_word_share_adds_up_the_spellings_of_each_side():
    token = _t("No", 0.5, ("No", 0.5), (" no", 0.1), ("Yes", 0.2), ("Ye", 0.1), ("Maybe", 0.1))
    assert word_share(token, YES, NO) == pytest.approx(0.3 / 0.9)
    assert word_share(token, NO, YES) == pytest.approx(0.6 / 0.9)


def test_an_alternative_that_fits_both_sides_counts_for_neither():
    token = _t("un", 0.5, ("un", 0.5), ("uncertain", 0.3), ("certain", 0.2))
    # "un" is a prefix of "uncertain" only; "certain" fits "certain" only
    assert word_share(token, ("uncertain",), ("certain",)) == pytest.approx(0.8)
    both = _t("ce", 0.6, ("ce", 0.6), ("certain", 0.4))
    assert word_share(both, ("certain",), ("certainly",)) is None  # every alternative fits both


def test_word_share_without_alternatives_or_either_side():
    assert word_share(_t("Yes", 0.7), YES, NO) == 1.0
    assert word_share(_t("No", 0.7), YES, NO) == 0.0
    assert word_share(_t("Maybe", 0.7, ("Maybe", 0.7), ("Perhaps", 0.2)), YES, NO) is None


def test_word_start_token_finds_the_token_where_the_word_begins():
    tokens = [_t("Answer", 0.9), _t(":", 0.9), _t(" Yes", 0.6), _t(",", 0.9)]
    text = "".join(t.token for t in tokens)
    assert word_start_token(tokens, text.index("Yes"), "yes") == 2
    assert word_start_token(tokens, text.index(" Yes"), "yes") == 2  # leading whitespace allowed
    # the word spelled over two tokens: no single token made the choice
    split = [_t("N", 0.5), _t("o", 0.9)]
    assert word_start_token(split, 0, "no") is None
    # the word begins inside a token after other text
    assert word_start_token([_t("IsNo", 0.5)], 2, "no") is None
    assert word_start_token(tokens, 100, "yes") is None


def test_graded_need_keeps_the_stated_side():
    assert graded_need(True, None) == 1.0
    assert graded_need(False, None) == 0.0
    assert graded_need(True, 0.8) == 0.8
    assert graded_need(False, 0.2) == 0.2
    # the stated word wins: the score stays on its side of the threshold
    assert graded_need(False, 0.9) == STATED_WORD_THRESHOLD
    above = graded_need(True, 0.1)
    assert above > STATED_WORD_THRESHOLD
    assert above == math.nextafter(STATED_WORD_THRESHOLD, math.inf)
