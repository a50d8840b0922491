"""Rarity of a question's words and names on wordfreq's Zipf scale, blended with a corpus."""

from __future__ import annotations

import math

import pytest

from adaptive_gates.records.data import load_corpus
from adaptive_gates.signals.word_rarity import (
    RARE_ZIPF,
    TOP_ZIPF,
    QuestionRarity,
    WordRarity,
    capitalised_spans,
    content_words,
    stop_words,
)


def test_stop_words_hold_the_wh_words():
    assert {"who", "what", "when", "the", "of"} <= stop_words()
    assert "newton" not in stop_words()


def test_content_words_leave_out_stop_words_and_numbers():
    assert content_words("Who discovered penicillin in 1928?") == ["discovered", "penicillin"]
    assert content_words("What is it?") == []


@pytest.mark.parametrize(
    ("question", "spans"),
    [
        ("When did Henry VIII marry Anne Boleyn?", ["Henry VIII", "Anne Boleyn"]),
        ("Newton wrote which book?", ["Newton"]),  # the first word counts when it is no stop word
        ("Who wrote Hamlet, and where is Stratford-upon-Avon?", ["Hamlet", "Stratford-upon-Avon"]),
        ("Was it Newton, Leibniz or Robert Hooke?", ["Newton", "Leibniz", "Robert Hooke"]),
        ("who sings i wont let the sun go down on me", []),
    ],
)
def test_capitalised_spans(question, spans):
    assert capitalised_spans(question) == spans


def test_zipf_from_wordfreq_alone():
    rarity = WordRarity()
    assert not rarity.has_corpus
    assert TOP_ZIPF > rarity.zipf("the") > 7
    assert rarity.zipf("the") > rarity.zipf("newton") > RARE_ZIPF > rarity.zipf("boleyn") > 0
    assert rarity.zipf("xqzvbwkq") == 0.0


def test_a_corpus_makes_its_own_terms_less_rare(corpus_path):
    texts = [p.text for p in load_corpus(corpus_path)]
    rarity = WordRarity.from_texts(texts)
    assert rarity.has_corpus
    assert rarity.total == sum(rarity.counts.values()) > 10_000
    web = WordRarity()
    # the corpus's most frequent rare-on-the-web word, and a word it never holds
    word = max((w for w in rarity.counts if web.zipf(w) < RARE_ZIPF and w.isalpha()), key=rarity.counts.get)
    own = math.log10(1e9 * (rarity.counts[word] + 1) / (rarity.total + len(rarity.counts)))
    assert rarity.zipf(word) == pytest.approx((web.zipf(word) + own) / 2)
    assert rarity.zipf(word) > web.zipf(word)
    assert rarity.zipf("xqzvbwkq") < 3  # unseen anywhere: stays rare


def test_rate_a_question():
    rated = WordRarity().rate("Which year did Anne Boleyn marry Henry VIII?")
    assert isinstance(rated, QuestionRarity)
    assert len(rated.content_zipfs) == len(content_words("Which year did Anne Boleyn marry Henry VIII?"))
    assert len(rated.span_zipfs) == 2
    assert rated.min_zipf == min(rated.content_zipfs)
    assert rated.mean_zipf == pytest.approx(sum(rated.content_zipfs) / len(rated.content_zipfs))
    assert rated.min_span_zipf == min(rated.span_zipfs)
    assert rated.n_rare == sum(z < RARE_ZIPF for z in rated.content_zipfs) >= 1  # "boleyn"
    assert rated.n_unknown == 0


def test_a_question_with_nothing_to_rate():
    rated = WordRarity().rate("who is it?")
    assert rated.content_zipfs == rated.span_zipfs == ()
    assert rated.min_zipf is rated.mean_zipf is rated.min_span_zipf is None
    assert (rated.n_rare, rated.n_unknown) == (0, 0)
    assert WordRarity().rate("what is a qzxvbwk?").n_unknown == 1
