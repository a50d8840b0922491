"""Input checks shared by every gate."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .errors import InvalidQuestionError

#: Questions longer than this are cut before encoding; encoders truncate anyway,
#: and a multi-megabyte string should not reach a tokenizer whole.
MAX_QUESTION_CHARS = 20_000


def check_question(question: object) -> str:
    """Return ``question`` stripped and bounded, or raise ``InvalidQuestionError``."""
    if not isinstance(question, str):
        raise InvalidQuestionError(
            f"a question must be a str, got {type(question).__name__}"
        )
    text = question.strip()
    if not text:
        raise InvalidQuestionError("a question must not be empty or whitespace")
    return text[:MAX_QUESTION_CHARS]


def check_batch(questions: object) -> list[object]:
    """The items of a batch of questions, unchecked, or ``InvalidQuestionError``
    when ``questions`` is not a batch at all.

    A single string would otherwise be taken as a batch of its characters, and a
    mapping as a batch of its keys; ``None`` and other non-iterables are refused
    with their type named.
    """
    if isinstance(questions, (str, bytes, bytearray)):
        raise InvalidQuestionError(
            "expected a sequence of questions, got a single string; wrap one question in a list"
        )
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
