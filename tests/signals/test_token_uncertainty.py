"""The four uncertainty signals of an answer's token log-probabilities."""

from __future__ import annotations

import math

import pytest

from adaptive_gates.records.token_logprobs import TokenLogprob
from adaptive_gates.signals.token_uncertainty import (
    SIGNALS,
    answer_tokens,
    check_signal,
    is_punctuation,
    is_special,
    max_entropy,
    mean_entropy,
    min_prob_need,
    perplexity,
    position_entropy,
    signal_values,
)

LN = math.log


def _t(token, p, *top):
    return TokenLogprob(token, LN(p), tuple((alt, LN(q)) for alt, q in top))


def test_special_and_punctuation_tokens():
    for token in ["<|im_end|>", "<|eot_id|>", "</s>", "<eos>", "<end_of_turn>", " <｜end▁of▁sentence｜>\n"]:
        assert is_special(token), token
    assert not any(is_special(t) for t in ["<b", "Paris", "< eos >", "<>"])
    assert all(is_punctuation(t) for t in [".", " ,", "?!", "«»", " -- "])
    assert not any(is_punctuation(t) for t in ["", " ", "a.", "1", "$"])


def test_answer_tokens_drop_specials_punctuation_and_outer_whitespace():
    tokens = [_t(" ", 0.9), _t("The", 0.8), _t(",", 0.9), _t(" Eiffel", 0.5), _t(" ", 0.6), _t(".", 0.99)]
    tokens += [_t("\n", 0.9), _t("<|im_end|>", 0.99)]
    assert [t.token for t in answer_tokens(tokens)] == ["The", " Eiffel"]
    assert answer_tokens([_t(".", 0.9), _t("<eos>", 0.9)]) == []
    inner = [_t("New", 0.9), _t(" ", 0.9), _t("York", 0.9)]
    assert answer_tokens(inner) == inner  # whitespace inside is kept


def test_position_entropy_over_alternatives_and_the_leftover():
    # two alternatives and a leftover of 0.2, exactly
    token = _t("a", 0.5, ("a", 0.5), ("b", 0.3))
    expected = -(0.5 * LN(0.5) + 0.3 * LN(0.3) + 0.2 * LN(0.2))
    assert position_entropy(token) == pytest.approx(expected)
    # all the mass among the alternatives: no leftover term
    assert position_entropy(_t("a", 0.5, ("a", 0.5), ("b", 0.5))) == pytest.approx(LN(2))
    # a chosen token outside its alternatives (sampled) counts as an outcome too
    sampled = _t("c", 0.1, ("a", 0.6), ("b", 0.3))
    assert position_entropy(sampled) == pytest.approx(-(0.6 * LN(0.6) + 0.3 * LN(0.3) + 0.1 * LN(0.1)))
    # no alternatives: the chosen token's surprisal
    assert position_entropy(_t("a", 0.25)) == pytest.approx(LN(4))
    # a certain token, and an alternative without mass
    certain = TokenLogprob("a", 0.0, (("a", 0.0), ("b", -math.inf)))
    assert position_entropy(certain) == 0.0


def test_two_alternatives_with_the_same_text_are_distinct_outcomes():
    token = _t("a", 0.5, ("a", 0.5), ("a", 0.5))
    assert position_entropy(token) == pytest.approx(LN(2))


def test_the_signals_of_an_answer():
    tokens = [_t("Paris", 0.9, ("Paris", 0.9), ("Lyon", 0.1)), _t(" France", 0.5, (" France", 0.5), (" Texas", 0.5))]
    entropies = [-(0.9 * LN(0.9) + 0.1 * LN(0.1)), LN(2)]
    assert max_entropy(tokens) == pytest.approx(max(entropies))
    assert mean_entropy(tokens) == pytest.approx(sum(entropies) / 2)
    assert perplexity(tokens) == pytest.approx(math.exp(-(LN(0.9) + LN(0.5)) / 2))
    assert min_prob_need(tokens) == pytest.approx(0.5)
    values = signal_values(tokens)
    assert list(values) == list(SIGNALS)
    assert values["perplexity"] == perplexity(tokens)


def test_a_certain_answer_scores_no_need():
    tokens = [TokenLogprob("Paris", 0.0), TokenLogprob(" France", 0.0)]
    assert signal_values(tokens) == {"max-entropy": 0.0, "mean-entropy": 0.0, "perplexity": 1.0, "min-prob": 0.0}


def test_a_less_sure_answer_scores_higher_on_every_signal():
    sure = [_t("Paris", 0.95, ("Paris", 0.95), ("Lyon", 0.04))]
    unsure = [_t("Paris", 0.4, ("Paris", 0.4), ("Lyon", 0.35), ("Nice", 0.2))]
    for name in SIGNALS:
        assert signal_values(unsure)[name] > signal_values(sure)[name], name


@pytest.mark.parametrize("fn", [max_entropy, mean_entropy, perplexity, min_prob_need, signal_values])
def test_no_tokens_is_an_error(fn):
    with pytest.raises(ValueError, match="no tokens to score"):
        fn([])


def test_check_signal():
    for name in SIGNALS:
        assert check_signal(name) == name
    with pytest.raises(ValueError, match=r"signal must be one of \['max-entropy', .*\], got 'entropy'"):
        check_signal("entropy")
