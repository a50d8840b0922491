"""Input checks shared by the gates and the model backends."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ..errors import InvalidQuestionError

#: Questions longer than this are cut before encoding; encoders truncate anyway,
#: and a multi-megabyte string should not reach a tokenizer whole.
MAX_QUESTION_CHARS = 20_000

#: Unicode categories that show nothing: controls (NUL, ...), format characters
#: (zero-width space and joiners, BOM, word joiner, direction marks) and separators.
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})

#: Unicode's default-ignorable code points outside those categories (a combining
#: grapheme joiner, Hangul fillers, variation selectors, tags), first to last: they
#: show nothing either.
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2065, 0x2065),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE0FFF),
)

#: Code points an error names of a question that shows nothing.
_NAMED_CODE_POINTS = 6


def is_invisible(char: str) -> bool:
    """Whether the one character ``char`` shows nothing: whitespace, a control or
    format character, or another of Unicode's default-ignorable code points."""
    point = ord(char)
    if unicodedata.category(char) in INVISIBLE_CATEGORIES:
        return True
    return any(first <= point <= last for first, last in _IGNORABLE_RANGES)


def check_question(question: object) -> str:
    """Return ``question`` stripped and bounded, or raise ``InvalidQuestionError``.

    A question must hold at least one visible character (``is_invisible``): one of
    only NUL, zero-width or other invisible characters is refused as an empty one
    is, since a gate would judge a question nobody can read.
    """
    if not isinstance(question, str):
        raise InvalidQuestionError(f"a question must be a str, got {type(question).__name__}")
    text = question.strip()
    if not text:
        raise InvalidQuestionError("a question must not be empty or whitespace")
    text = text[:MAX_QUESTION_CHARS]
    if all(is_invisible(c) for c in text):
        points = " ".join(f"U+{ord(c):04X}" for c in text[:_NAMED_CODE_POINTS])
        more = f" and {len(text) - _NAMED_CODE_POINTS} more" if len(text) > _NAMED_CODE_POINTS else ""
        raise InvalidQuestionError(
            f"a question must hold a visible character, got only invisible ones ({points}{more}): "
            "whitespace, control or format characters such as a zero-width space"
        )
    check_encodable(text, "a question")
    return text


def check_encodable(text: str, what: str) -> None:
    """Raise ``InvalidQuestionError`` when ``text`` cannot be encoded as UTF-8.

    A lone surrogate (``"\\ud800"``, what ``surrogateescape`` decoding leaves of bad
    bytes) fits in a Python string but in no UTF-8 request body, tokenizer or file:
    found here it is named, instead of failing later as a server's "malformed JSON".
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidQuestionError(
            f"{what} cannot be encoded as UTF-8: {exc.reason} {text[exc.start]!r} at position {exc.start}"
        ) from None


def check_batch(questions: object) -> list[object]:
    """The items of a batch of questions, unchecked, or ``InvalidQuestionError``
    when ``questions`` is not a batch at all.

    A single string would otherwise be taken as a batch of its characters, and a
    mapping as a batch of its keys; ``None`` and other non-iterables are refused
    with their type named.
    """
    if isinstance(questions, (str, bytes, bytearray)):
        raise InvalidQuestionError("expected a sequence of questions, got a single string; wrap one question in a list")
    if isinstance(questions, Mapping) or not isinstance(questions, Iterable):
        raise InvalidQuestionError(f"expected a sequence of questions, got {type(questions).__name__}")
    return list(questions)


def check_questions(questions: Iterable[object]) -> list[str]:
    """Validate a batch; the error names the position of the first bad item."""
    out = []
    for i, q in enumerate(check_batch(questions)):
        try:
            out.append(check_question(q))
        except InvalidQuestionError as exc:
            raise InvalidQuestionError(f"question {i}: {exc}") from None
    return out


def check_outcomes(values: object, what: str) -> np.ndarray:
    """Per-question correctness as float64: each value 0/1, a bool, or a graded score
    in [0, 1] (a metric such as F1).

    Anything else (NaN, 2, -1, a string) is refused with its position named: an
    outcome says how right an answer was, and a threshold fitted to other numbers
    would look right while meaning nothing.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"{what} must be a sequence of outcomes in [0, 1], got {type(values).__name__}")
    items = list(values)
    for i, value in enumerate(items):
        number = isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))
        if not number or not 0 <= value <= 1:  # NaN fails the comparison too
            raise ValueError(f"{what}[{i}] must be 0/1, a bool or a graded score in [0, 1], got {value!r}")
    return np.asarray(items, dtype=np.float64)


def check_labels(labels: Sequence[object], n: int) -> list[int]:
    """Binary labels (1 = retrieval needed) matching ``n`` questions."""
    if len(labels) != n:
        raise ValueError(f"got {len(labels)} labels for {n} questions")
    out = []
    for i, label in enumerate(labels):
        if isinstance(label, bool) or label in (0, 1):
            out.append(int(label))
        else:
            raise ValueError(f"label {i} must be 0/1 or bool, got {label!r}")
    return out


def check_text(text: object, what: str) -> None:
    """Raise ``ValueError`` unless ``text`` is a non-blank string (``what`` names it)."""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{what} must not be empty or whitespace")


# Upper bounds of the numbers a user sets, far above any sensible setting and well below
# what exhausts the machine or overflows a timer (a count of 10**20 samples asks for
# memory no machine has; a timeout of 1e308 s overflows the clock it is added to).

#: Samples per uncertainty estimate (SeaKR's k; the paper draws 20).
MAX_SAMPLES = 64
#: Seconds a timeout may be: one day.
MAX_SECONDS = 86_400.0
#: New tokens per answer: the longest context of the models this package runs.
MAX_NEW_TOKENS = 32_768
#: Requests in flight at once (each is a thread and a connection).
MAX_CONCURRENCY = 256
#: Components an embedding is reduced to (wider than any embedding model's vectors).
MAX_EMBEDDING_DIMS = 65_536


def check_count(value: object, name: str, high: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an int in ``[1, high]`` (naming both)."""
    check_positive(value, name)
    if value > high:  # type: ignore[operator]  # an int, checked above
        raise ValueError(f"{name} must be at most {high}, got {value!r}")


def check_seconds(value: object, name: str) -> float:
    """``value`` as a float, or a ``ValueError`` unless it is a number of seconds in
    (0, ``MAX_SECONDS``]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        raise ValueError(f"{name} must be a positive number of seconds, at most {MAX_SECONDS:g} (a day), got {value!r}")
    return float(value)


def check_positive(value: object, name: str) -> None:
    """Raise ``ValueError`` unless ``value`` is an int >= 1 (a bool is no count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_stops(stop: str | Sequence[str] | None) -> list[str]:
    """Stop strings as a list (``None`` = none; one string = that one), each non-empty."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if any(not isinstance(s, str) or not s for s in stops):
        raise ValueError(f"stop strings must be non-empty strings, got {stops!r}")
    return stops


def check_sampling(k: int, temperature: float, top_k: int, top_p: float, max_new_tokens: int) -> None:
    """Raise ``ValueError`` for sampling settings a causal LM cannot draw with (or
    should not: more than ``MAX_SAMPLES`` samples or ``MAX_NEW_TOKENS`` tokens)."""
    check_count(k, "k", MAX_SAMPLES)
    check_count(max_new_tokens, "max_new_tokens", MAX_NEW_TOKENS)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0 (0 = off), got {top_k!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def check_base_url(url: object) -> str:
    """Return ``url`` when it is an http(s) URL with a host, else raise ``ValueError`` naming it.

    A base URL an HTTP client cannot use (``"not a url"``, or ``"localhost:8000/v1"``
    without its scheme) would otherwise show only at the first request, after every
    input is loaded, as a connection failure on each question.
    """
    from urllib.parse import urlsplit

    problem = f"base URL {url!r} is not an http(s) URL with a host, e.g. http://localhost:8000/v1"
    if not isinstance(url, str):
        raise ValueError(problem)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        raise ValueError(problem) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(problem)
    return url
