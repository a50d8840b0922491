"""What a gate makes of a batch of questions, before it decides: ``Gate._score``'s result.

A gate scores clean questions and shows its evidence; some also answered first (the
verbalized and log-prob gates: a draft the direct branch can serve), could not judge
some question (a failed request, nothing to rate: the fallback decision, with why),
already decided some question by a rule of their own (a cascade's stage), or count
the LLM requests each question cost (what evaluations and composites read). Each of
these is a field here rather than a reserved key inside the evidence, so the evidence
a decision shows is only evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...records.data import Hit


@dataclass
class Verdict:
    """A decision a gate took by a rule of its own: whether to retrieve, and the
    threshold it was taken against (shown as ``GateDecision.threshold``)."""

    retrieve: bool
    threshold: float


@dataclass
class Assessment:
    """Need scores of a batch of questions with what else the gate found.

    Attributes:
        scores: need scores, one per question (NaN where the gate has none).
        details: each question's evidence (``GateDecision.details``).
        drafts: the gate's own answer to each question (``None``: it gave none); every
            decision on the question carries it as
            ``GateDecision.answer_without_retrieval`` (so an evaluation can tell what a
            retrieval replaced), and a decision not to retrieve also as
            ``GateDecision.draft_answer``, to serve.
        fallbacks: why the gate could not judge each question (``None``: it could);
            such a question gets the fallback decision whatever its score. A NaN
            score without a reason falls back too, as a backend error.
        verdicts: a decision already taken for each question (``None``: the gate's
            threshold decides), e.g. by the stage of a cascade that judged it.
        llm_calls: the LLM requests the gate made for each question
            (``GateDecision.llm_calls``; ``None``: it does not count them).
        passages: the passages the gate retrieved for each question while judging it
            (``GateDecision.passages``; ``None``: it retrieved none).
    """

    scores: np.ndarray
    details: list[dict[str, Any]]
    drafts: list[str | None] = field(default_factory=list)
    fallbacks: list[str | None] = field(default_factory=list)
    verdicts: list[Verdict | None] = field(default_factory=list)
    llm_calls: Sequence[float | None] = field(default_factory=list)
    passages: list[tuple[Hit, ...] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scores = np.asarray(self.scores, dtype=np.float64)
        n = len(self.scores)
        self.drafts = self.drafts or [None] * n
        self.fallbacks = self.fallbacks or [None] * n
        self.verdicts = self.verdicts or [None] * n
        self.llm_calls = self.llm_calls or [None] * n
        self.passages = self.passages or [None] * n
        parts = (self.details, self.drafts, self.fallbacks, self.verdicts, self.llm_calls, self.passages)
        lengths = {len(part) for part in parts}
        if lengths != {n}:
            raise ValueError(f"an assessment of {n} scores has parts of lengths {sorted(lengths)}")

    @classmethod
    def of(cls, result: Assessment | tuple[Sequence[float] | np.ndarray, list[dict[str, Any]]]) -> Assessment:
        """``result`` as an assessment: a gate with nothing but scores and evidence may
        return the pair ``(scores, details)`` from ``_score``."""
        if isinstance(result, Assessment):
            return result
        scores, details = result
        return cls(np.asarray(scores, dtype=np.float64), list(details))

    def reason(self, i: int) -> str | None:
        """Why question ``i`` gets the fallback decision, or ``None`` when it does not."""
        if self.fallbacks[i] is not None:
            return self.fallbacks[i]
        return None if np.isfinite(self.scores[i]) else "backend error: non-finite score"
