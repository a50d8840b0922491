"""The one record every gate returns."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class GateDecision:
    """A gate's verdict on one question, with everything needed to see why.

    Attributes:
        retrieve: True when the LLM should retrieve before answering.
        score: the need score (higher = more need for retrieval); NaN when the
            gate could not compute one and fell back.
        threshold: the threshold the score was compared with.
        gate: the name of the gate that decided (e.g. ``"skr-knn"``).
        latency_ms: wall time the decision took, in milliseconds.
        question: the question as the gate received it.
        details: method-specific evidence (neighbours, cluster distances, parsed
            certainty, uncertainty and sample count, ...). JSON-serialisable.
        draft_answer: an answer the gate already produced (e.g. a confident
            verbalized reply), so the direct branch need not call the LLM again.
        error: why a fallback decision was taken; ``None`` for a normal decision.
    """

    retrieve: bool
    score: float
    threshold: float
    gate: str
    latency_ms: float = 0.0
    question: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    draft_answer: str | None = None
    error: str | None = None

    @property
    def is_fallback(self) -> bool:
        """True when the decision is a fallback taken because of an error."""
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (a non-finite score or threshold becomes ``None``)."""
        out = asdict(self)
        for key in ("score", "threshold"):
            if isinstance(out[key], float) and not math.isfinite(out[key]):
                out[key] = None
        return out
