"""The one record every gate returns."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, Literal

from .data import Hit

#: How a request may steer retrieval: ``"auto"`` (the gate decides), or forced.
RetrievalMode = Literal["auto", "always", "never"]
RETRIEVAL_MODES: tuple[RetrievalMode, ...] = ("auto", "always", "never")

#: How a question is answered after a decision: over retrieved passages, by the LLM
#: alone, or with the gate's own draft answer (no further LLM call).
AnswerRoute = Literal["retrieve", "direct", "draft"]
RETRIEVE: AnswerRoute = "retrieve"
DIRECT: AnswerRoute = "direct"
DRAFT: AnswerRoute = "draft"
ROUTES: tuple[AnswerRoute, ...] = (RETRIEVE, DIRECT, DRAFT)


def check_retrieval_mode(mode: object, what: str = "retrieval") -> RetrievalMode:
    """``mode`` if it is one of ``RETRIEVAL_MODES``, else ``ValueError`` naming ``what``."""
    if mode not in RETRIEVAL_MODES:
        raise ValueError(f"{what} must be one of {RETRIEVAL_MODES}, got {mode!r}")
    return mode


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
            verbalized reply), so the direct branch need not call the LLM again; a
            gate sets it only on a decision that neither retrieves nor falls back.
        error: why a fallback decision was taken; ``None`` for a normal decision.
        llm_calls: the LLM requests the gate made to decide (a share of its batch's
            requests where only the batch is counted, as a cascade's stage is);
            ``None`` for a gate that does not ask an LLM through a chat model.
        answer_without_retrieval: the answer the LLM gave without passages while the
            gate decided (an answer-first gate's draft), kept whatever the decision,
            retrieving and fallback ones included, so an evaluation can reuse it as
            the answer without retrieval and tell what a retrieval replaced; ``None``
            for a gate that does not answer first. It is never served:
            ``draft_answer`` is.
        passages: the passages the gate retrieved while deciding (a gate that checks
            its draft against one retrieval), best first; ``None`` for a gate that
            retrieves nothing. A door answers a ``"retrieve"`` route over these, with
            no second retrieval, and may show them as the sources a draft was checked
            against.
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
    llm_calls: float | None = None
    answer_without_retrieval: str | None = None
    passages: tuple[Hit, ...] | None = None

    @classmethod
    def forced(cls, question: object, gate: str, retrieval: RetrievalMode) -> GateDecision:
        """The decision a request forces (``"always"`` or ``"never"``): nothing scored,
        and the evidence says it was forced."""
        if retrieval not in ("always", "never"):
            raise ValueError(f"a forced decision is 'always' or 'never', got {retrieval!r}")
        return cls(
            retrieve=retrieval == "always",
            score=math.nan,
            threshold=math.nan,
            gate=gate,
            question=question if isinstance(question, str) else None,
            details={"forced": retrieval},
        )

    @classmethod
    def fallback(
        cls,
        question: object,
        gate: str,
        retrieve: bool,
        error: str,
        *,
        threshold: float = math.nan,
        latency_ms: float = 0.0,
        details: dict[str, Any] | None = None,
        llm_calls: float | None = None,
        answer_without_retrieval: str | None = None,
        passages: tuple[Hit, ...] | None = None,
    ) -> GateDecision:
        """The decision taken when ``gate`` could not judge ``question``: its fallback
        verdict ``retrieve``, no score, and why as ``error``."""
        return cls(
            retrieve=retrieve,
            score=math.nan,
            threshold=threshold,
            gate=gate,
            latency_ms=latency_ms,
            question=question if isinstance(question, str) else None,
            details=details or {},
            error=error,
            llm_calls=llm_calls,
            answer_without_retrieval=answer_without_retrieval,
            passages=passages,
        )

    @property
    def route(self) -> AnswerRoute:
        """How to answer: ``"retrieve"`` when the gate retrieves; ``"draft"`` when it
        does not and drafted a usable (non-blank) answer; else ``"direct"``. Every door
        (the frameworks' routers, the server) answers by this one rule; a door that does
        not reuse drafts answers a ``"draft"`` route directly."""
        if self.retrieve:
            return RETRIEVE
        if isinstance(self.draft_answer, str) and self.draft_answer.strip():
            return DRAFT
        return DIRECT

    @property
    def is_fallback(self) -> bool:
        """True when the decision is a fallback taken because of an error."""
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (a non-finite score or threshold becomes ``None``), sharing
        no container with the decision."""
        out = {f.name: _json_copy(getattr(self, f.name)) for f in dataclass_fields(self)}
        for key in ("score", "threshold"):
            if isinstance(out[key], float) and not math.isfinite(out[key]):
                out[key] = None
        if self.passages is not None:
            out["passages"] = [asdict(hit) for hit in self.passages]
        return out

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> GateDecision:
        """The decision ``to_dict`` gave (a ``None`` score or threshold comes back as NaN).

        Raises:
            ValueError: ``fields`` is not such a dict (a field missing, unknown or of
                the wrong kind).
        """
        if not isinstance(fields, Mapping):
            raise ValueError(f"a GateDecision dict is a mapping, got {type(fields).__name__}")
        declared = dataclass_fields(cls)
        unknown = sorted(set(fields) - {f.name for f in declared})
        required = (f.name for f in declared if f.default is MISSING and f.default_factory is MISSING)
        missing = sorted(name for name in required if name not in fields)
        if unknown or missing:
            raise ValueError(f"not a GateDecision dict: unknown fields {unknown}, missing fields {missing}")
        values = dict(fields)
        for key in ("score", "threshold"):
            if values[key] is None:
                values[key] = math.nan
        if not isinstance(values["retrieve"], bool) or not isinstance(values["gate"], str):
            raise ValueError("not a GateDecision dict: 'retrieve' must be a bool and 'gate' a str")
        if not isinstance(values.get("details", {}), dict):
            raise ValueError("not a GateDecision dict: 'details' must be a dict")
        values["passages"] = _passages(values.get("passages"))
        calls = values.get("llm_calls")
        if calls is not None and (isinstance(calls, bool) or not isinstance(calls, (int, float))):
            raise ValueError("not a GateDecision dict: 'llm_calls' must be a number or None")
        return cls(**values)


def _passages(value: Any) -> tuple[Hit, ...] | None:
    """The ``passages`` of a decision dict as hits (``ValueError`` when malformed)."""
    if value is None:
        return None
    try:
        return tuple(Hit(**hit) for hit in value)
    except TypeError:
        raise ValueError("not a GateDecision dict: 'passages' must list hits (id, text, score, title)") from None


def _json_copy(value: Any) -> Any:
    """``value`` with its dicts, lists and tuples copied all the way down: the evidence
    is JSON-shaped, and ``dataclasses.asdict``'s generic walk costs a routed call more
    than the gate's own kNN search (``benchmarks/langchain_overhead.py``)."""
    if isinstance(value, dict):
        return {k: _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_json_copy(v) for v in value)
    return value
