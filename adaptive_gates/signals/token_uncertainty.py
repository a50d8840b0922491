"""How unsure an LLM was of an answer it wrote, from the answer's token log-probabilities.

Pure functions over ``Sequence[TokenLogprob]`` (what a chat backend returns with
``top_logprobs=n``, and what outcome records keep in ``logprobs_no_retrieval``). Four
signals, each higher = less sure (see docs/logprob_gate.md):

- ``max-entropy``: the largest per-position entropy (nats) over the answer's tokens;
- ``mean-entropy``: their mean (SeaKR's length-normalised entropy);
- ``perplexity``: ``exp(-mean log p(chosen token))``;
- ``min-prob``: ``1 - min p(chosen token)`` (FLARE's rule: a token below θ means retrieve).

The entropy at one position is taken over the returned alternatives with the mass they
leave over (``1 - sum p``) as one more outcome. By the grouping property of entropy that
is exactly the entropy of the next-token distribution with its tail merged into one
bucket, a lower bound of the full-vocabulary entropy, short of it by ``r · H(tail)``
(``r`` the leftover mass). A position without alternatives falls back to the chosen
token's surprisal ``-log p``, the one-sample estimate of that entropy.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models.chat.base import TokenLogprob

#: The signals, in the order reports list them.
SIGNALS: tuple[str, ...] = ("max-entropy", "mean-entropy", "perplexity", "min-prob")

#: End-of-turn and other special tokens as backends write them: ``<|im_end|>``,
#: ``<|eot_id|>``, ``</s>``, ``<eos>``, ``<end_of_turn>``, ``<｜end▁of▁sentence｜>``.
_SPECIAL = re.compile(r"^<[|/]?[\w.-]+\|?>$|^<｜.*｜>$")


def is_special(token: str) -> bool:
    """Whether ``token`` is an end-of-turn or other special token's text."""
    return bool(_SPECIAL.match(token.strip()))


def is_punctuation(token: str) -> bool:
    """Whether ``token`` is punctuation only (whitespace around it allowed)."""
    text = token.strip()
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def answer_tokens(tokens: Sequence[TokenLogprob]) -> list[TokenLogprob]:
    """The tokens that carry the answer: without special tokens and punctuation-only
    tokens anywhere, then without whitespace-only tokens at either end."""
    kept = [t for t in tokens if not is_special(t.token) and not is_punctuation(t.token)]
    start, end = 0, len(kept)
    while start < end and not kept[start].token.strip():
        start += 1
    while end > start and not kept[end - 1].token.strip():
        end -= 1
    return kept[start:end]


def position_entropy(token: TokenLogprob) -> float:
    """The entropy (nats) of the next-token distribution at ``token``'s position, over
    its alternatives plus the leftover mass as one outcome (a lower bound of the full
    entropy); the chosen token's surprisal when the backend gave no alternatives.

    The chosen token counts among the outcomes even when it is not among the
    alternatives (sampled decoding). Alternatives are distinct tokens even when two
    decode to the same text.
    """
    if not token.top:
        return -token.logprob
    logprobs = [lp for _, lp in token.top]
    if token.token not in {alt for alt, _ in token.top}:
        logprobs.append(token.logprob)
    entropy = -sum(math.exp(lp) * lp for lp in logprobs if lp > -math.inf)
    leftover = 1.0 - sum(math.exp(lp) for lp in logprobs)
    if leftover > 0.0:
        entropy -= leftover * math.log(leftover)
    return max(entropy, 0.0)


def _check_nonempty(tokens: Sequence[TokenLogprob]) -> None:
    if not tokens:
        raise ValueError("no tokens to score")


def max_entropy(tokens: Sequence[TokenLogprob]) -> float:
    """The largest ``position_entropy`` over ``tokens``."""
    _check_nonempty(tokens)
    return max(position_entropy(t) for t in tokens)


def mean_entropy(tokens: Sequence[TokenLogprob]) -> float:
    """The mean ``position_entropy`` over ``tokens`` (length-normalised entropy)."""
    _check_nonempty(tokens)
    return sum(position_entropy(t) for t in tokens) / len(tokens)


def perplexity(tokens: Sequence[TokenLogprob]) -> float:
    """``exp(-mean log p)`` of the chosen tokens: 1 when every token was certain."""
    _check_nonempty(tokens)
    return math.exp(-sum(t.logprob for t in tokens) / len(tokens))


def min_prob_need(tokens: Sequence[TokenLogprob]) -> float:
    """``1 - min p`` of the chosen tokens: how far the least likely token fell short of certain."""
    _check_nonempty(tokens)
    return 1.0 - math.exp(min(t.logprob for t in tokens))


_SIGNAL_FUNCTIONS = {
    "max-entropy": max_entropy,
    "mean-entropy": mean_entropy,
    "perplexity": perplexity,
    "min-prob": min_prob_need,
}


def signal_values(tokens: Sequence[TokenLogprob]) -> dict[str, float]:
    """All four signals of ``tokens`` (non-empty), by name."""
    return {name: fn(tokens) for name, fn in _SIGNAL_FUNCTIONS.items()}


def check_signal(signal: str) -> str:
    """``signal`` if it is one of ``SIGNALS``; ``ValueError`` naming them otherwise."""
    if signal not in _SIGNAL_FUNCTIONS:
        raise ValueError(f"signal must be one of {list(SIGNALS)}, got {signal!r}")
    return signal
