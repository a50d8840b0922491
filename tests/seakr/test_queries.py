"""FLARE-style search queries from a pseudo-generated step."""

from __future__ import annotations

import itertools
import math

import pytest

from adaptive_gates.seakr.queries import FUNCTION_WORDS, SearchQuery, build_query, is_content_word, token_spans


def test_content_words_and_function_words():
    for word in ("Paris", "wrote", "1969", "three", "first", "quickly", "O'Brien", "Jean-Paul"):
        assert is_content_word(word), word
    for word in ("the", "of", "which", "was", "a", "I", "they'll"):
        assert not is_content_word(word), word
    assert "three" not in FUNCTION_WORDS and "the" in FUNCTION_WORDS


def test_token_spans_cover_the_decoded_text(lm):
    tokenizer = lm.tokenizer
    ids = tokenizer.encode(" The Eiffel Tower is in Paris.", add_special_tokens=False)
    spans = token_spans(tokenizer, ids)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert len(spans) == len(ids)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(s <= e for s, e in spans)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert "".join(text[s:e] for s, e in spans) == text


def test_the_query_keeps_confident_content_words_of_a_real_generation(lm):
    question = "Where is the Eiffel Tower?"
    generation = lm.generate(question, max_new_tokens=12, stop=["\n"])[0]
    query = build_query(generation.text, generation.token_ids, generation.token_logprobs, lm.tokenizer, question)
    assert isinstance(query, SearchQuery)
    if query.fallback:
        assert query.text == question and query.words == ()
    else:
        assert query.text == " ".join(query.words)
        assert all(w in generation.text and is_content_word(w) for w in query.words)
    # theta near 1 keeps every content word of the text
    everything = build_query(
        generation.text, generation.token_ids, generation.token_logprobs, lm.tokenizer, question, theta=0.999999
    )
    assert set(query.words) <= set(everything.words)


def test_uncertain_words_go_unless_the_question_or_previous_step_has_them(lm):
    tokenizer = lm.tokenizer
    text = "Gustave Eiffel built the tower in Paris"
    ids = tokenizer.encode(text, add_special_tokens=False)
    unsure = [math.log(0.5)] * len(ids)
    assert build_query(text, ids, unsure, tokenizer, "Who was it?").fallback
    query = build_query(text, ids, unsure, tokenizer, "Who built the tower?", previous_step="It is in Paris.")
    assert query.words == ("built", "tower", "Paris")
    sure = [0.0] * len(ids)
    assert build_query(text, ids, sure, tokenizer, "q?").words == ("Gustave", "Eiffel", "built", "tower", "Paris")


def test_with_no_word_left_the_question_is_the_query(lm):
    tokenizer = lm.tokenizer
    ids = tokenizer.encode("it was the one", add_special_tokens=False)
    query = build_query("it was the", ids, [0.0] * len(ids), tokenizer, "  Who   built the tower? ")
    assert query == SearchQuery("Who built the tower?", (), True)


def test_bad_arguments_are_refused(lm):
    with pytest.raises(ValueError, match=r"theta must be in \[0, 1\)"):
        build_query("x", [1], [0.0], lm.tokenizer, "q", theta=1.0)
    with pytest.raises(ValueError, match=r"2 token ids but 1 log-probabilities"):
        build_query("x", [1, 2], [0.0], lm.tokenizer, "q")
