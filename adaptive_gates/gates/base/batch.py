"""A batch of decisions put together: the questions split into those to score and those
refused, and, once the clean ones are assessed, each question's decision in the order
the questions came. What ``Gate.decide_batch`` and ``Gate.adecide_batch`` share; it
reads no clock, logs nothing and tells no listener (the gate does, around it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import InvalidQuestionError
from ...records.decision import GateDecision
from ...records.validation import check_question
from .assessment import Assessment, Verdict

#: A gate's rule on the judged scores of a batch (``Gate._verdicts``): given the scores,
#: the batch's threshold, each question's evidence and the verdicts its stages took,
#: whether each retrieves and the threshold each was decided by.
Verdicts = Callable[[np.ndarray, float, list[dict[str, Any]], list[Verdict | None]], tuple[np.ndarray, np.ndarray]]


@dataclass
class Batch:
    """A batch being decided: the questions as given, the threshold read for it, when
    it started, and its questions split into clean ones (to score) and refused ones
    (by position: the question, or why it was refused)."""

    questions: list[object]
    threshold: float
    start: float
    clean: dict[int, str] = field(default_factory=dict)
    problems: dict[int, str] = field(default_factory=dict)

    @property
    def to_score(self) -> list[str]:
        """The clean questions, in batch order."""
        return list(self.clean.values())


def open_batch(questions: Sequence[object], threshold: float, start: float) -> Batch:
    """``questions`` split into the clean ones to score and those refused (``invalid
    question: ...``), to be decided by ``threshold``."""
    batch = Batch(list(questions), threshold, start)
    for i, question in enumerate(batch.questions):
        try:
            batch.clean[i] = check_question(question)
        except InvalidQuestionError as exc:
            batch.problems[i] = f"invalid question: {exc}"
    return batch


def assemble_decisions(
    batch: Batch,
    scored: Assessment | Exception | None,
    *,
    gate: str,
    fallback_retrieve: bool,
    verdicts: Verdicts,
    latency_ms: float,
) -> list[GateDecision]:
    """Each question's decision, in batch order, from the assessment of the batch's clean
    questions (``scored``; the exception scoring them raised; ``None`` when none was
    scored).

    A refused question, every clean one when scoring raised (``backend error: ...``) and
    each the assessment could not judge (its ``reason``) get the gate's fallback
    (``fallback_retrieve``) with why as ``error``, and whatever the assessment found of
    them. The judged ones are decided together by ``verdicts`` at the batch's threshold.
    """
    problems = dict(batch.problems)
    judged: list[int] = []  # batch positions decided by their score
    at: dict[int, int] = {}  # batch position -> position in the assessment
    if isinstance(scored, Exception):
        problems.update({i: f"backend error: {type(scored).__name__}: {scored}" for i in batch.clean})
    elif scored is not None:
        for j, i in enumerate(batch.clean):
            at[i] = j
            reason = scored.reason(j)
            if reason is None:
                judged.append(i)
            else:
                problems[i] = reason
    assessment = scored if isinstance(scored, Assessment) else None
    retrieve: dict[int, bool] = {}
    thresholds: dict[int, float] = {}
    if judged:
        assert assessment is not None
        rows = [at[i] for i in judged]
        flags, used = verdicts(
            assessment.scores[rows],
            batch.threshold,
            [assessment.details[j] for j in rows],
            [assessment.verdicts[j] for j in rows],
        )
        retrieve, thresholds = dict(zip(judged, map(bool, flags))), dict(zip(judged, map(float, used)))
    decisions = []
    for i, question in enumerate(batch.questions):
        details, calls, drafted, passages = (
            (
                assessment.details[at[i]],
                assessment.llm_calls[at[i]],
                assessment.drafts[at[i]],
                assessment.passages[at[i]],
            )
            if assessment is not None and i in at
            else (None, None, None, None)
        )
        if i in problems:
            decisions.append(
                GateDecision.fallback(
                    question,
                    gate,
                    fallback_retrieve,
                    problems[i],
                    threshold=batch.threshold,
                    latency_ms=latency_ms,
                    details=details,
                    llm_calls=calls,
                    answer_without_retrieval=drafted,
                    passages=passages,
                )
            )
            continue
        assert assessment is not None  # judged: only an assessment judges
        decisions.append(
            GateDecision(
                retrieve=retrieve[i],
                score=float(assessment.scores[at[i]]),
                threshold=thresholds[i],
                gate=gate,
                latency_ms=latency_ms,
                question=batch.clean[i],
                details=details or {},
                draft_answer=None if retrieve[i] else drafted,
                llm_calls=calls,
                answer_without_retrieval=drafted,
                passages=passages,
            )
        )
    return decisions
