"""Token log-probabilities: the record of one token (``TokenLogprob``, what a chat reply
and an outcome record both hold, so records need no backend), and the shape OpenAI's
chat API writes them in, and back.

An answer's tokens are stored in outcome records (``logprobs_no_retrieval``) in the
shape of ``choices[0].logprobs.content``: one entry per token,
``{"token": str, "logprob": float, "top_logprobs": [{"token": str, "logprob": float}, ...]}``,
so records collected from any OpenAI-compatible server, or written by hand from
another API, are read the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TokenLogprob", "impossible_logprob", "tokens_from_openai", "tokens_to_openai"]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the most likely alternatives
    at its position (``(token, logprob)``, best first)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


def impossible_logprob(tokens: Sequence[TokenLogprob]) -> str | None:
    """What no model could have given in ``tokens``, naming the first such token, or
    ``None`` when every log-probability is one.

    A chosen token's log-probability lies in (-inf, 0]: above 0 or NaN is no
    probability, and -inf is a token the model gave no mass, which it cannot have
    written. An alternative may be -inf (fewer tokens had mass than were asked for),
    never above 0 or NaN. Read as they come, such values score as certainty (a
    log-probability of +7 is an entropy below zero), so a reply holding one is not to
    be trusted.
    """
    for i, t in enumerate(tokens):
        if not -math.inf < t.logprob <= 0:  # NaN fails the comparison too
            return f"token {i} ({t.token!r}) has log-probability {t.logprob!r}, outside (-inf, 0]"
        bad = next(((alt, lp) for alt, lp in t.top if not lp <= 0), None)
        if bad is not None:
            return f"token {i}'s alternative {bad[0]!r} has log-probability {bad[1]!r}, outside [-inf, 0]"
    return None


def tokens_to_openai(
    tokens: Sequence[TokenLogprob], *, top: int | None = None, with_bytes: bool = False
) -> list[dict[str, Any]]:
    """``tokens`` as a JSON-ready list in OpenAI's ``logprobs.content`` shape: what an
    outcome record stores and what a chat model that speaks OpenAI's format returns.

    Args:
        tokens: the tokens, in order.
        top: the most alternatives kept per token (``None``: all).
        with_bytes: add each token's and alternative's UTF-8 ``bytes``, as OpenAI's
            replies carry them (records leave them out).
    """
    return [
        _entry(t.token, t.logprob, with_bytes) | {"top_logprobs": _alternatives(t, top, with_bytes)} for t in tokens
    ]


def _entry(token: str, logprob: float, with_bytes: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"token": token, "logprob": float(logprob)}
    if with_bytes:
        entry["bytes"] = list(token.encode("utf-8"))
    return entry


def _alternatives(token: TokenLogprob, top: int | None, with_bytes: bool) -> list[dict[str, Any]]:
    kept = token.top if top is None else token.top[:top]
    return [_entry(alt, lp, with_bytes) for alt, lp in kept]


def _field(entry: object, name: str) -> object:
    """A field of an entry given as a JSON object or as a parsed response object."""
    return entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)


def _entry_logprob(entry: object, where: str, strict: bool) -> float:
    value = _field(entry, "logprob")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: 'logprob' must be a number, got {value!r}")
    # -inf is a real log-probability (a token the model gave no mass); NaN and +inf are not.
    if strict and (math.isnan(value) or value > 0):
        raise ValueError(f"{where}: 'logprob' must be <= 0, got {value!r}")
    if math.isnan(value) or value == math.inf:
        raise ValueError(f"{where}: 'logprob' must be a finite number or -inf, got {value!r}")
    return float(value)


def _entry_token(entry: object, where: str, strict: bool) -> tuple[str, float]:
    if not isinstance(entry, Mapping) and not hasattr(entry, "token"):
        raise ValueError(f"{where} must be an object with 'token' and 'logprob', got {type(entry).__name__}")
    token = _field(entry, "token")
    if not isinstance(token, str):
        raise ValueError(f"{where}: 'token' must be a string, got {token!r}")
    return token, _entry_logprob(entry, where, strict)


def tokens_from_openai(entries: object, *, strict: bool = True) -> tuple[TokenLogprob, ...]:
    """Tokens from OpenAI's ``logprobs.content`` list, its entries JSON objects (a
    record, a message's metadata) or the objects an OpenAI client parses a reply into
    (``top_logprobs`` may be missing or empty).

    ``strict`` (records): every log-probability is one a model could give, in
    (-inf, 0], and an alternative's may be -inf. Not ``strict`` (a backend's reply,
    which the gate judges afterwards with ``impossible_logprob`` and refuses by name):
    any number but NaN and +inf.

    Raises:
        ValueError: naming the entry that does not fit the shape.
    """
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence):
        raise ValueError(f"must be a list of token entries, got {type(entries).__name__}")
    tokens = []
    for i, entry in enumerate(entries):
        token, logprob = _entry_token(entry, f"entry {i}", strict)
        if strict and logprob == -math.inf:  # an alternative may have no mass; a written token had some
            raise ValueError(f"entry {i}: 'logprob' of the chosen token {token!r} is -inf, a token no model writes")
        top = _field(entry, "top_logprobs") or []
        if isinstance(top, (str, bytes)) or not isinstance(top, Sequence):
            raise ValueError(f"entry {i}: 'top_logprobs' must be a list, got {type(top).__name__}")
        alternatives = tuple(_entry_token(alt, f"entry {i}, alternative {j}", strict) for j, alt in enumerate(top))
        tokens.append(TokenLogprob(token, logprob, alternatives))
    return tuple(tokens)
