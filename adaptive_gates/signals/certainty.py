"""Reading a stated certainty out of an LLM reply (When-to-Retrieve, SPEC §3).

The authors' parser marks a reply uncertain when it contains any of a list of words
("no", "false", "sorry", ...), so a factual "No" counts as doubt, and it deletes the
certainty words by substring replacement, cutting inside words. Here the certainty is a
separate *marker*: the last whole word "certain" / "uncertain" / "unsure" that stands as
a verdict (not "certainly", "uncertainty" or "a certain amount"), negation-aware
("not certain"). The answer is what remains once that marker's clause is removed. A
reply with no marker but an explicit refusal ("I don't know") is uncertain; anything
else has no certainty and goes to the post-hoc judgement. Only the reply is parsed: the
question never reaches this module.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..records.answer_metrics import first_line
from .word_choice import word_share, word_start_token

if TYPE_CHECKING:
    from ..models.chat.base import TokenLogprob

CERTAIN = "certain"
UNCERTAIN = "uncertain"

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_UNCERTAIN_WORDS = frozenset({"uncertain", "unsure"})
# "certain" followed by a word is a marker only before these ("certain that ...");
# otherwise it is the adjective of "a certain amount".
_AFTER_CERTAIN = frozenset({"that", "about", "of", "and", "but", "because", "it's", "its", "this", "the"})
_NEGATORS = frozenset({"not", "never", "isn't", "aren't", "don't", "doesn't", "am't", "ain't"})
# Words that belong to a marker's clause ("I am fairly certain") and leave with it.
_CLAUSE_FILLER = frozenset(
    {
        "i",
        "i'm",
        "im",
        "am",
        "is",
        "it",
        "it's",
        "this",
        "that",
        "my",
        "answer",
        "the",
        "very",
        "quite",
        "fairly",
        "pretty",
        "completely",
        "absolutely",
        "totally",
        "entirely",
        "100",
        "and",
        "so",
        "feel",
        "confidence",
        "certainty",
        "judgement",
        "judgment",
        "level",
        "not",
        "never",
        "i'd",
        "say",
    }
)
# Words after a marker that still belong to its clause ("certain that the answer is").
_RIGHT_FILLER = frozenset({"that", "the", "answer", "is", "this", "it", "it's", "about", "of", "and"})
_LEFT_SEPARATORS = " \t,;:-–—([*\"'“”"
_RIGHT_SEPARATORS = " \t.,;:!)]*\"'“”"
_REFUSALS = tuple(
    re.compile(rf"(?<![\w']){phrase}(?![\w'])")
    for phrase in (
        r"i don't know",
        r"i do not know",
        r"i'm not sure",
        r"i am not sure",
        r"not sure",
        r"cannot answer",
        r"can't answer",
        r"unable to (?:answer|determine|provide)",
        r"no information",
        r"not enough information",
        r"no definitive answer",
        r"no specific answer",
        r"cannot determine",
        r"can't determine",
        r"i'm sorry",
        r"i am sorry",
        r"i apologi[sz]e",
        r"my apologies",
    )
)
# "1. Paris", "1.Paris", "- Paris"; not "0." alone or "1.5 million".
_NUMBERING = re.compile(r"^\s*(?:\d+[.)]|[-*•])(?:\s+|(?=[^\W\d_]))(?=\S)")
_ANSWER_PREFIX = re.compile(r"^\s*(?:the\s+)?answer(?:\s+is)?\s*[:\-]?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class CertaintyParse:
    """What a reply says about its own certainty.

    Attributes:
        certainty: ``"certain"``, ``"uncertain"`` or ``None`` (the reply states none).
        answer: the reply's answer with the marker's clause removed (first line,
            without numbering or an "Answer:" prefix); empty when nothing is left.
        marker: the text that decided (e.g. ``"not certain"``, ``"I don't know"``).
        source: ``"marker"``, ``"refusal"`` or ``"none"``.
        span: character span of ``marker`` in the reply.
    """

    certainty: str | None
    answer: str
    marker: str | None = None
    source: str = "none"
    span: tuple[int, int] | None = None

    @property
    def uncertain(self) -> bool | None:
        """True / False for a stated certainty, ``None`` when there is none."""
        return None if self.certainty is None else self.certainty == UNCERTAIN


def _normalise(text: str) -> str:
    """Typographic apostrophes made plain; character positions are kept."""
    return text.replace("’", "'")


def _markers(text: str) -> list[tuple[str, int, int, bool]]:
    """Every marker as ``(certainty, start, end, negated)``, in reply order; a negated
    marker's span starts at its negator."""
    words = list(_WORD.finditer(text))
    found = []
    for i, match in enumerate(words):
        word = match.group().lower()
        if word == CERTAIN:
            followed_by_word = text[match.end() :].lstrip(" \t")[:1].isalnum()
            if followed_by_word and (i + 1 >= len(words) or words[i + 1].group().lower() not in _AFTER_CERTAIN):
                continue  # "a certain amount": the adjective, not a verdict
            certainty = CERTAIN
        elif word in _UNCERTAIN_WORDS:
            certainty = UNCERTAIN
        else:
            continue
        negator = _negator(text, words, i)
        if negator is not None:
            certainty = UNCERTAIN if certainty == CERTAIN else CERTAIN
            found.append((certainty, words[negator].start(), match.end(), True))
        else:
            found.append((certainty, match.start(), match.end(), False))
    return found


def _negator(text: str, words: list[re.Match[str]], i: int) -> int | None:
    """Index of a negator at most two words before word ``i`` in the same clause
    ("not certain", "not very certain")."""
    for j in range(i - 1, max(i - 3, -1), -1):
        if any(ch in ",.;:!?\n" for ch in text[words[j].end() : words[j + 1].start()]):
            return None
        if words[j].group().lower() in _NEGATORS:
            return j
    return None


def _clause_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen a marker's span over its filler words ("I am fairly certain that the
    answer is") and the separators around it."""
    while True:
        head = text[:start].rstrip(_LEFT_SEPARATORS)
        last = _last_word(head)
        if last is None or last.end() != len(head) or last.group().lower() not in _CLAUSE_FILLER:
            start = len(head)
            break
        start = last.start()
    while True:
        end += len(text[end:]) - len(text[end:].lstrip(_RIGHT_SEPARATORS))
        following = _WORD.match(text, end)
        if following is None or following.group().lower() not in _RIGHT_FILLER:
            return start, end
        end = following.end()


def _last_word(text: str) -> re.Match[str] | None:
    last = None
    for match in _WORD.finditer(text):
        last = match
    return last


def clean_reply_answer(text: str) -> str:
    """The first non-empty line of ``text`` without numbering, an "Answer:" prefix or
    trailing punctuation."""
    return first_line(text, _clean_reply_line).strip()


def _clean_reply_line(line: str) -> str:
    return _ANSWER_PREFIX.sub("", _NUMBERING.sub("", line)).strip().strip("\"'“” ").rstrip(".,;:!")


def parse_certainty(reply: str) -> CertaintyParse:
    """Parse one reply (see the module docstring for the rules)."""
    if not isinstance(reply, str):
        raise ValueError(f"reply must be a str, got {type(reply).__name__}")
    text = _normalise(reply)
    markers = _markers(text)
    if markers:
        rest = text
        for _, start, end, _ in reversed(markers):  # every marker's clause leaves the answer
            cut_start, cut_end = _clause_span(text, start, end)
            rest = rest[:cut_start] + "\n" + rest[cut_end:] if cut_start > 0 else rest[cut_end:]
        certainty, start, end, _ = markers[-1]  # the last verdict counts
        return CertaintyParse(certainty, clean_reply_answer(rest), text[start:end], "marker", (start, end))
    lowered = text.lower()
    for pattern in _REFUSALS:
        refusal = pattern.search(lowered)
        if refusal:
            return CertaintyParse(UNCERTAIN, "", text[refusal.start() : refusal.end()], "refusal", refusal.span())
    return CertaintyParse(None, clean_reply_answer(text))


def marker_uncertain_probability(
    reply: str, parse: CertaintyParse, tokens: Sequence[TokenLogprob] | None
) -> float | None:
    """P(uncertain) / (P(uncertain) + P(certain)) at the token where the marker begins.

    Beyond the paper (which reads only the word): the probabilities the model gave the
    two words at that position grade the need score (see ``word_choice``). ``None``
    when there are no token log-probs, the marker is negated or a refusal, or the
    marker's first letter does not start a token.
    """
    if not tokens or parse.source != "marker" or parse.span is None or parse.marker is None:
        return None
    wanted = parse.marker.lower()
    if wanted not in (CERTAIN, *_UNCERTAIN_WORDS):
        return None  # negated: the choice was made at the negator, not between the two words
    position = _marker_token(_normalise(reply)[: parse.span[1]], wanted, tokens)
    return None if position is None else uncertain_share(tokens[position])


def uncertain_share(token: TokenLogprob) -> float | None:
    """P(uncertain) / (P(uncertain) + P(certain)) among the alternatives at ``token``
    ("unsure" counts as uncertain; matching as ``word_choice.word_share``)."""
    return word_share(token, _UNCERTAIN_WORDS, (CERTAIN,))


def _marker_token(reply_through_marker: str, wanted: str, tokens: Sequence[TokenLogprob]) -> int | None:
    """Index of the token whose text starts the marker word.

    The marker is found in the concatenated token text as the same occurrence of the
    word as in the reply (the reply is the tokens' text, possibly stripped).
    """
    occurrence = sum(1 for m in _WORD.finditer(reply_through_marker) if m.group().lower() == wanted)
    joined = _normalise("".join(t.token for t in tokens))
    starts = [m.start() for m in _WORD.finditer(joined) if m.group().lower() == wanted]
    if occurrence == 0 or len(starts) < occurrence:
        return None
    return word_start_token(tokens, starts[occurrence - 1], wanted)
