"""The command line's values, checked as they are parsed: counts, rates, ``--option``
pairs and server URLs (an error here is the argument's own). Counts and durations have
upper bounds (``records.validation``: samples, tokens, concurrency, seconds), so a
typo of a few zeros is refused at once instead of exhausting memory or a timer."""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
from typing import Any

from ..records.validation import MAX_CONCURRENCY, MAX_NEW_TOKENS, MAX_SAMPLES, MAX_SECONDS, check_base_url

#: The most alternatives per token OpenAI gives.
MAX_TOP_LOGPROBS = 20


def key_value(text: str) -> tuple[str, Any]:
    """A ``--option KEY=VALUE``: VALUE read as JSON, else kept as a bare word."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"options are KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare word such as majority
    return key.replace("-", "_"), value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _count_at_most(text: str, high: int) -> int:
    value = positive_int(text)
    if value > high:
        raise argparse.ArgumentTypeError(f"must be at most {high}, got {text!r}")
    return value


def samples(text: str) -> int:
    """Samples per uncertainty estimate: 1 to ``MAX_SAMPLES``."""
    return _count_at_most(text, MAX_SAMPLES)


def max_tokens(text: str) -> int:
    """New tokens per answer: 1 to ``MAX_NEW_TOKENS``."""
    return _count_at_most(text, MAX_NEW_TOKENS)


def concurrency(text: str) -> int:
    """Requests in flight at once: 1 to ``MAX_CONCURRENCY``."""
    return _count_at_most(text, MAX_CONCURRENCY)


def top_logprobs(text: str) -> int:
    """Alternatives per token: at least one, at most OpenAI's bound."""
    value = positive_int(text)
    if value > MAX_TOP_LOGPROBS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TOP_LOGPROBS}, got {text!r}")
    return value


def _share(text: str, *, allow_one: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0.0 < value <= 1.0 if allow_one else 0.0 < value < 1.0):  # NaN fails either way
        bounds = "in (0, 1]" if allow_one else "strictly between 0 and 1"
        raise argparse.ArgumentTypeError(f"must be a number {bounds}, got {text!r}")
    return value


def rate(text: str) -> float:
    """A retrieval rate to calibrate for: 0 and 1 need no gate (never / always retrieve)."""
    return _share(text, allow_one=False)


def max_rate(text: str) -> float:
    """A cap on the retrieval rate: 1 is no cap, 0 would forbid retrieving at all."""
    return _share(text, allow_one=True)


def share(text: str) -> float:
    """A share of questions, in [0, 1] (0: none)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}")
    return value


def base_url(text: str) -> str:
    """A server's base URL: an http(s) URL with a host, refused before anything is loaded."""
    try:
        return check_base_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A positive number of seconds, at most ``MAX_SECONDS`` (a day)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_SECONDS:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, at most {MAX_SECONDS:g}, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port to listen on: 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to 65535, got {text!r}")
    return value


def ip_address_or_network(text: str) -> str:
    """An IP address (``10.0.0.5``) or network (``10.0.0.0/8``), as given."""
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an IP address or network, got {text!r}") from None
    return text
