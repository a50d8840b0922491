"""FLARE-style search queries from a pseudo-generated reasoning step (SPEC §4.2).

From the greedy pseudo-generation keep the words the model was sure of (every token of
the word has probability >= ``1 - theta``) or that already occur in the question or the
previous step; then keep only content words (nouns, verbs, adjectives, proper nouns,
numbers, adverbs); if none is left, search with the question itself.

The paper tags parts of speech with spaCy; its models (and NLTK's data) cannot be
downloaded here, so the content-word test works offline: a word is a function word
when it is in scikit-learn's English stop-word list, minus the numerals, nouns and
verbs that list also holds. Pronouns, determiners, prepositions, conjunctions and
auxiliaries are in the list. It also holds adverbs ("always", "often") and a few verbs
("became", "seems") that a POS filter would keep; they are dropped here, and a BM25
index with English stop words ignores most of them anyway.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

__all__ = ["FUNCTION_WORDS", "SearchQuery", "build_query", "is_content_word", "token_spans"]

#: Entries of scikit-learn's stop-word list that are content words by part of speech
#: (numerals, nouns, verbs, adjectives): a POS filter would keep them.
_CONTENT_STOP_WORDS = frozenset(
    [
        "bill",
        "bottom",
        "call",
        "cry",
        "describe",
        "detail",
        "eight",
        "eleven",
        "empty",
        "fifteen",
        "fifty",
        "fill",
        "find",
        "fire",
        "first",
        "five",
        "forty",
        "found",
        "four",
        "front",
        "full",
        "give",
        "hundred",
        "interest",
        "keep",
        "last",
        "made",
        "mill",
        "move",
        "name",
        "nine",
        "part",
        "put",
        "see",
        "serious",
        "show",
        "side",
        "sincere",
        "six",
        "sixty",
        "system",
        "take",
        "ten",
        "thick",
        "thin",
        "third",
        "three",
        "top",
        "twelve",
        "twenty",
        "two",
        "one",
    ]
)
#: Pronouns, determiners, prepositions, conjunctions, auxiliaries and the like.
FUNCTION_WORDS = frozenset(ENGLISH_STOP_WORDS) - _CONTENT_STOP_WORDS
# A word: letters/digits, optionally joined by inner hyphens, apostrophes or dots
# ("Jean-Paul", "O'Brien", "1.5").
_WORD = re.compile(r"\w+(?:[-'’.]\w+)*")


@dataclass(frozen=True)
class SearchQuery:
    """A query and how it was made: ``words`` kept from the generation, or the question
    when ``fallback`` (no word survived)."""

    text: str
    words: tuple[str, ...]
    fallback: bool


def is_content_word(word: str) -> bool:
    """True for a noun, verb, adjective, proper noun, number or adverb (offline heuristic:
    anything with a digit, or a word of two or more characters not in the function-word list)."""
    if any(ch.isdigit() for ch in word):
        return True
    lowered = word.lower().replace("’", "'")
    return len(lowered) > 1 and lowered.split("'")[0] not in FUNCTION_WORDS


def token_spans(tokenizer: Any, token_ids: Sequence[int]) -> list[tuple[int, int]]:
    """Character span of each token in ``tokenizer.decode(token_ids)``.

    Spans come from decoding growing prefixes: re-encoding the text with offsets could
    split it into other tokens than the ones generated, whose probabilities we hold.
    """
    spans, start = [], 0
    for i in range(len(token_ids)):
        end = len(tokenizer.decode(token_ids[: i + 1], skip_special_tokens=True))
        spans.append((start, max(start, end)))
        start = max(start, end)
    return spans


def _words_of(text: str) -> set[str]:
    return {m.group().lower() for m in _WORD.finditer(text)}


def build_query(
    text: str,
    token_ids: Sequence[int],
    token_logprobs: Sequence[float],
    tokenizer: Any,
    question: str,
    previous_step: str = "",
    *,
    theta: float = 0.1,
) -> SearchQuery:
    """The search query for a pseudo-generated step ``text`` (SPEC §4.2, FLARE's rule).

    ``token_ids``/``token_logprobs`` are the generation's tokens (they may run past
    ``text`` when a stop string was cut off); ``theta`` is FLARE's masking threshold:
    a word is kept when each of its tokens has probability >= ``1 - theta``.
    """
    if not 0 <= theta < 1:
        raise ValueError(f"theta must be in [0, 1), got {theta!r}")
    if len(token_ids) != len(token_logprobs):
        raise ValueError(f"{len(token_ids)} token ids but {len(token_logprobs)} log-probabilities")
    floor = math.log1p(-theta)
    spans = token_spans(tokenizer, token_ids)
    known = _words_of(question) | _words_of(previous_step)
    kept = []
    for match in _WORD.finditer(text):
        start, end = match.span()
        probs = [lp for (s, e), lp in zip(spans, token_logprobs) if s < end and e > start]
        confident = bool(probs) and min(probs) >= floor
        word = match.group()
        if (confident or word.lower() in known) and is_content_word(word):
            kept.append(word)
    if not kept:
        return SearchQuery(" ".join(question.split()), (), True)
    return SearchQuery(" ".join(kept), tuple(kept), False)
