"""How strongly a model chose a stated word over its opposite, and the need score of a
stated decision graded by it.

The prompt gates read a decision from a word the model wrote: SKR-prompt its first word
("yes" / "no"), the verbalized gate its marker ("certain" / "uncertain"). With token
log-probabilities, the alternatives at the token where that word begins say how close
the choice was. Beyond the papers, this grades the need score so a threshold can be
calibrated; the stated word itself still decides which side of 0.5 the score falls on.
"""

from __future__ import annotations

import math
import string
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models.chat.base import TokenLogprob

#: The default threshold of a gate whose score comes from ``graded_need``: scores at or
#: below it were stated "no retrieval", scores above it "retrieve".
STATED_WORD_THRESHOLD = 0.5
_JUST_ABOVE = math.nextafter(STATED_WORD_THRESHOLD, math.inf)
_TRIM = string.whitespace + string.punctuation
_MIN_PREFIX = 2


def word_share(token: TokenLogprob, words: Collection[str], others: Collection[str]) -> float | None:
    """P(words) / (P(words) + P(others)) among the alternatives at ``token``'s position
    (the token alone when the backend gave no alternatives).

    The one matching rule: an alternative counts for a word when, lower-cased and
    without surrounding spaces or punctuation, it is the word or a prefix of it at
    least two letters long (" No,", "Ye", "Unc" for "uncertain"; not "N", "Not" or
    "certainly"). Probabilities of all spellings of one side add up. An alternative
    that fits both sides counts for neither. ``None`` when neither side appears.
    """
    mass = [0.0, 0.0]
    for alternative, logprob in token.top or ((token.token, token.logprob),):
        fits = [spells(alternative, side) for side in (words, others)]
        if fits[0] != fits[1]:
            mass[0 if fits[0] else 1] += math.exp(logprob)
    total = mass[0] + mass[1]
    return mass[0] / total if total > 0 else None


def spells(token_text: str, words: Collection[str]) -> bool:
    """Whether a token's text counts for one of ``words`` (the rule of ``word_share``)."""
    text = token_text.strip(_TRIM).lower()
    return len(text) >= _MIN_PREFIX and any(word.lower().startswith(text) for word in words)


def word_start_token(tokens: Sequence[TokenLogprob], start: int, word: str) -> int | None:
    """Index of the token that chose ``word``, which begins at character ``start`` of
    the tokens' joined text: the token must begin there (leading whitespace allowed)
    and spell the word's start. ``None`` otherwise: then the choice between words was
    not made at one token ("N" + "o"), and that token's alternatives do not weigh it."""
    offset = 0
    for index, token in enumerate(tokens):
        if offset <= start < offset + len(token.token):
            if token.token[: start - offset].strip() or not spells(token.token, (word,)):
                return None
            return index
        offset += len(token.token)
    return None


def graded_need(retrieve: bool, p_retrieve: float | None) -> float:
    """The need score of a stated decision.

    Without probabilities it is 1 (retrieve) or 0. With them it is ``p_retrieve``
    kept on the stated side of ``STATED_WORD_THRESHOLD``: a model that wrote "No"
    while its spellings of "yes" added up to more scores 0.5, not above it. So the
    default threshold reproduces the stated word exactly, while the score still
    orders questions by probability for calibration and curves.
    """
    if p_retrieve is None:
        return 1.0 if retrieve else 0.0
    if retrieve:
        return max(p_retrieve, _JUST_ABOVE)
    return min(p_retrieve, STATED_WORD_THRESHOLD)
