"""Answer metrics shared by every gate and benchmark (SPEC §5).

One normaliser (lower-case, NFD, punctuation deleted or turned into spaces,
articles removed, whitespace collapsed) and three metrics, each the max over the
gold answers: exact match, token F1 and "contains answer".
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

__all__ = [
    "METRICS",
    "contains_answer",
    "exact_match",
    "extract_after_answer_is",
    "extract_seakr_answer",
    "first_line",
    "get_metric",
    "normalize_answer",
    "token_f1",
]

PunctuationMode = Literal["delete", "space"]
_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# Short answers that must match exactly: token overlap between "yes" and "no"
# answers is meaningless (SeaKR's F1 guard).
_F1_SPECIAL = {"yes", "no", "noanswer"}


def normalize_answer(text: str, punctuation: PunctuationMode = "delete") -> str:
    """SQuAD-style normalisation; ``punctuation="space"`` keeps word boundaries
    (``"Jean-Paul"`` -> ``"jean paul"`` instead of ``"jeanpaul"``)."""
    text = unicodedata.normalize("NFD", str(text)).lower()
    if punctuation == "space":
        text = "".join(" " if ch in _PUNCT else ch for ch in text)
    elif punctuation == "delete":
        text = "".join(ch for ch in text if ch not in _PUNCT)
    else:
        raise ValueError(f"punctuation must be 'delete' or 'space', got {punctuation!r}")
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(answers: str | Sequence[str]) -> list[str]:
    return [answers] if isinstance(answers, str) else list(answers)


def exact_match(prediction: str, answers: str | Sequence[str], punctuation: PunctuationMode = "delete") -> float:
    """1.0 when the normalised prediction equals a normalised gold answer."""
    pred = normalize_answer(prediction, punctuation)
    return float(any(pred == normalize_answer(g, punctuation) for g in _golds(answers)))


def _f1(pred: str, gold: str) -> float:
    if (pred in _F1_SPECIAL or gold in _F1_SPECIAL) and pred != gold:
        return 0.0
    common = Counter(pred.split()) & Counter(gold.split())
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred.split())
    recall = overlap / len(gold.split())
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, answers: str | Sequence[str], punctuation: PunctuationMode = "delete") -> float:
    """Token-overlap F1, max over gold answers, with SeaKR's yes/no/noanswer guard."""
    pred = normalize_answer(prediction, punctuation)
    return max((_f1(pred, normalize_answer(g, punctuation)) for g in _golds(answers)), default=0.0)


def _contains_tokens(haystack: list[str], needle: list[str]) -> bool:
    if not needle:
        return False
    n = len(needle)
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def contains_answer(prediction: str, answers: str | Sequence[str], punctuation: PunctuationMode = "delete") -> float:
    """1.0 when a normalised gold answer occurs in the prediction as a contiguous
    token sequence (whole tokens: "paris" is not found in "parisian")."""
    pred = normalize_answer(prediction, punctuation).split()
    return float(any(_contains_tokens(pred, normalize_answer(g, punctuation).split()) for g in _golds(answers)))


MetricFn = Callable[[str, Sequence[str]], float]
METRICS: dict[str, MetricFn] = {"em": exact_match, "f1": token_f1, "contains": contains_answer}


def get_metric(name: str) -> MetricFn:
    """The metric function called ``name`` (``contains``, ``em`` or ``f1``)."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; choose from {sorted(METRICS)}") from None


_ANSWER_IS = re.compile(r"answer is\s*:?\s*(.*)", re.IGNORECASE | re.DOTALL)
_SEAKR_ANSWER = re.compile(r"the answer is(?:\s*:\s*)?(.*?)[,.]")
_SEAKR_IS_THE_ANSWER = re.compile(r"(.*) is the answer")


def first_line(text: str, clean: Callable[[str], str] = str.strip) -> str:
    """The first line of ``text`` that ``clean`` leaves non-empty, cleaned; empty when
    there is none. Every answer cleaner of the package reads a reply this way."""
    for line in text.splitlines():
        line = clean(line)
        if line:
            return line
    return ""


def extract_after_answer_is(text: str) -> str:
    """The text after the last "answer is" (the whole text when absent), first line only."""
    matches = list(_ANSWER_IS.finditer(text))
    tail = matches[-1].group(1) if matches else text
    return first_line(tail).rstrip(".")


def extract_seakr_answer(text: str) -> str | None:
    """SeaKR's final-answer extraction (lower-cased): ``the answer is X[,.]``,
    else ``X is the answer``; ``None`` when neither pattern matches."""
    lowered = text.lower()
    match = _SEAKR_ANSWER.search(lowered) or _SEAKR_IS_THE_ANSWER.search(lowered)
    return match.group(1).strip() if match else None
