"""Input checks shared by every gate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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


def check_questions(questions: Iterable[object]) -> list[str]:
    """Validate a batch; the error names the position of the first bad item."""
    if isinstance(questions, (str, bytes)):
        raise InvalidQuestionError("expected a sequence of questions, got a single string")
    out = []
    for i, q in enumerate(questions):
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
