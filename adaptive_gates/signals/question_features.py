"""Cheap features of a question's wording, for the stacked gate's combiner.

No model: the question's length, its wh-word, answer-type cues (a year, a count,
a comparison or a second hop), capitalised spans, numbers, and the rarity figures of
``word_rarity`` (Mallen et al.: rare entities are what an LLM does not know). Each is
a column of ``question_features``; ``FEATURE_NAMES`` names them in order, and a saved
stacked gate records them so that a different feature set is refused on load.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from .word_rarity import TOP_ZIPF, WordRarity, capitalised_spans

#: The opening words told apart; "how many/much" is a count question, not a "how".
_WH_WORDS = ("who", "what", "when", "where", "which", "why", "how")
#: Openings of yes/no questions.
_AUXILIARIES = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "can",
        "could",
        "has",
        "have",
        "had",
        "will",
        "would",
        "should",
        "shall",
        "may",
        "might",
    ]
)
_CUES: dict[str, re.Pattern[str]] = {
    # the answer is a date or a year
    "cue_time": re.compile(r"\b(when|year|date|century|decade|born|died|founded|established)\b"),
    # the answer is a number
    "cue_count": re.compile(r"\b(how (many|much|long|old|far|tall)|number of|population)\b"),
    # a comparison of two things (a typical multi-hop form)
    "cue_compare": re.compile(r"\b(or|both|same|older|younger|first|earlier|later|than|more|less)\b"),
    # a bridge: the question describes one thing through another ("the director of the film that...")
    "cue_bridge": re.compile(r"\b(of the|who (also|was|is)|which (also|was|is)|that (was|is))\b"),
}

FEATURE_NAMES: tuple[str, ...] = (
    "log_words",
    *(f"wh_{w}" for w in _WH_WORDS),
    "wh_count",
    "wh_yes_no",
    *_CUES,
    "n_spans",
    "n_numbers",
    "rarity_min",
    "rarity_mean",
    "rarity_span",
    "n_rare",
    "n_unknown",
    "rarity_total",
)


def question_opening(words: list[str]) -> dict[str, float]:
    """One-hot of the question's kind by its first words (all zero: none of them)."""
    out = {f"wh_{w}": 0.0 for w in _WH_WORDS} | {"wh_count": 0.0, "wh_yes_no": 0.0}
    if not words:
        return out
    first = words[0]
    if first == "how" and len(words) > 1 and words[1] in ("many", "much"):
        out["wh_count"] = 1.0
    elif first in _WH_WORDS:
        out[f"wh_{first}"] = 1.0
    elif first in _AUXILIARIES:
        out["wh_yes_no"] = 1.0
    else:  # "In which year ...", "Name the ...": the first wh-word anywhere decides
        wh = next((w for w in words if w in _WH_WORDS), None)
        if wh is not None:
            out[f"wh_{wh}"] = 1.0
    return out


def features_of(question: str, rarity: WordRarity) -> dict[str, float]:
    """The named features of one question."""
    lowered = question.lower()
    words = re.findall(r"[a-z0-9']+", lowered)
    rated = rarity.rate(question)
    no_content = TOP_ZIPF  # a question without content words: as common as can be
    min_zipf = no_content if rated.min_zipf is None else rated.min_zipf
    values = {
        "log_words": math.log1p(len(words)),
        **question_opening(words),
        **{name: float(bool(pattern.search(lowered))) for name, pattern in _CUES.items()},
        "n_spans": float(len(capitalised_spans(question))),
        "n_numbers": float(len(re.findall(r"\d+", question))),
        "rarity_min": TOP_ZIPF - min_zipf,
        "rarity_mean": TOP_ZIPF - (no_content if rated.mean_zipf is None else rated.mean_zipf),
        "rarity_span": TOP_ZIPF - (min_zipf if rated.min_span_zipf is None else rated.min_span_zipf),
        "n_rare": float(rated.n_rare),
        "n_unknown": float(rated.n_unknown),
        "rarity_total": sum(TOP_ZIPF - z for z in rated.content_zipfs),
    }
    return values


def question_features(questions: Sequence[str], rarity: WordRarity | None = None) -> np.ndarray:
    """The feature matrix (one row per question, columns in ``FEATURE_NAMES`` order)."""
    rarity = rarity or WordRarity()
    rows = [features_of(q, rarity) for q in questions]
    return np.array([[row[name] for name in FEATURE_NAMES] for row in rows], dtype=np.float64).reshape(
        len(rows), len(FEATURE_NAMES)
    )
