"""How rare a question's words and named spans are: the popularity proxy of the
popularity gate (Mallen et al., 2023) and the rarity figures of the stacked gate.

Frequencies are on wordfreq's Zipf scale: log10 of occurrences per billion words
(``the`` ≈ 7.7, ``newton`` ≈ 3.9, a word it never saw 0). With a corpus of the user's
own (``WordRarity.from_texts``), a word's frequency in that corpus is put on the same
scale (its collection frequency per billion tokens, add-one smoothed: the log-IDF of
a corpus of short passages) and averaged with wordfreq's, so a term that is common
in the user's domain but rare on the web counts as half as rare.

Content words: wordfreq's tokens with a letter that are not English stop words
(scikit-learn's list, which holds the wh-words). Numbers are left to the stacked
gate's own features: a year is not an entity. Capitalised spans: runs of words
written with a capital, read from the question as typed, the first word counting
only when it is no stop word ("Who" opens a question, "Newton" may).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from wordfreq import tokenize, zipf_frequency

LANGUAGE = "en"
#: Above the most frequent English word (``the``, 7.73): rarity = TOP_ZIPF − Zipf ≥ 0.
TOP_ZIPF = 8.0
#: A word or span rarer than this (fewer than one in a million words) counts as rare.
RARE_ZIPF = 3.0

_WORD = re.compile(r"[^\W_][\w'’.\-]*", re.UNICODE)


@cache
def stop_words() -> frozenset[str]:
    """scikit-learn's English stop words (imported on first use: scikit-learn is heavy)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def content_words(question: str) -> list[str]:
    """The question's lower-cased content words (tokens with a letter, no stop words)."""
    stop = stop_words()
    return [t for t in tokenize(question, LANGUAGE) if t not in stop and any(c.isalpha() for c in t)]


def capitalised_spans(question: str) -> list[str]:
    """Runs of consecutive capitalised words, as typed (``"Henry VIII"``)."""
    spans: list[list[str]] = []
    previous_end = -2
    for i, match in enumerate(_WORD.finditer(question)):
        word = match.group().rstrip(".'’-")
        if not word or not word[0].isupper() or (i == 0 and word.lower() in stop_words()):
            previous_end = -2
            continue
        gap = question[previous_end : match.start()] if previous_end >= 0 else None
        if gap is not None and gap.strip() == "":
            spans[-1].append(word)
        else:
            spans.append([word])
        previous_end = match.start() + len(word)
    return [" ".join(span) for span in spans]


@dataclass(frozen=True)
class QuestionRarity:
    """The rarity figures of one question (Zipf values; None when there is nothing to rate)."""

    content_zipfs: tuple[float, ...]
    span_zipfs: tuple[float, ...]

    @property
    def min_zipf(self) -> float | None:
        return min(self.content_zipfs) if self.content_zipfs else None

    @property
    def mean_zipf(self) -> float | None:
        return sum(self.content_zipfs) / len(self.content_zipfs) if self.content_zipfs else None

    @property
    def min_span_zipf(self) -> float | None:
        return min(self.span_zipfs) if self.span_zipfs else None

    @property
    def n_rare(self) -> int:
        return sum(z < RARE_ZIPF for z in self.content_zipfs)

    @property
    def n_unknown(self) -> int:
        return sum(z == 0.0 for z in self.content_zipfs)


@dataclass
class WordRarity:
    """Zipf frequencies from wordfreq, blended with a corpus's own when one is given.

    ``counts``/``total``: token counts of the user's corpus (empty: wordfreq alone).
    """

    counts: dict[str, int] = field(default_factory=dict)
    total: int = 0

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> WordRarity:
        """Count the tokens of a corpus (wordfreq's tokenizer, lower-cased)."""
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(tokenize(text, LANGUAGE))
        return cls(dict(counts), sum(counts.values()))

    @property
    def has_corpus(self) -> bool:
        return self.total > 0

    def zipf(self, text: str) -> float:
        """The Zipf frequency of a word or phrase (a phrase: wordfreq's estimate for
        its words together, and the rarest of its words in the corpus)."""
        web = zipf_frequency(text, LANGUAGE)
        if not self.has_corpus:
            return web
        words = tokenize(text, LANGUAGE) or [text.lower()]
        vocabulary = len(self.counts)
        own = min(math.log10(1e9 * (self.counts.get(w, 0) + 1) / (self.total + vocabulary)) for w in words)
        return (web + max(own, 0.0)) / 2

    def rate(self, question: str) -> QuestionRarity:
        """The Zipf values of the question's content words and capitalised spans."""
        return QuestionRarity(
            tuple(self.zipf(w) for w in content_words(question)),
            tuple(self.zipf(s) for s in capitalised_spans(question)),
        )
