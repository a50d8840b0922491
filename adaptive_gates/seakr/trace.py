"""The record a SeaKR run leaves behind: the final answer and every step that led to it.

Everything is JSON-ready through ``to_dict``; undefined uncertainties (NaN) become ``null``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Candidate", "Route", "SeaKRResult", "Step"]


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _json_ready(obj: Any) -> Any:
    """``asdict`` output with every non-finite float turned into ``None``."""
    if isinstance(obj, float):
        return _finite_or_none(obj)
    if isinstance(obj, dict):
        return {k: _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_ready(v) for v in obj]
    return obj


@dataclass
class Candidate:
    """A retrieved snippet offered to the re-ranker: its BM25 rank and score, and the
    uncertainty U after reading it (``None`` when re-ranking is off)."""

    id: str
    title: str
    bm25_rank: int
    bm25_score: float
    uncertainty: float | None = None


@dataclass
class Step:
    """One reasoning step: the gate's pseudo-generation and its U, whether and what it
    searched, the candidates and the chosen snippet, and the step text kept."""

    index: int
    pseudo: str = ""
    uncertainty: float | None = None
    n_samples: int = 0
    retrieve: bool = False
    query: str | None = None
    query_fallback: bool = False
    candidates: list[Candidate] = field(default_factory=list)
    chosen: str | None = None
    chosen_uncertainty: float | None = None
    text: str = ""
    error: str | None = None


@dataclass
class Route:
    """A candidate final answer (SPEC §4.4): ``rationale`` or ``knowledge``, the text it was
    read from, its extracted answer (``None`` when missing) and its uncertainty."""

    name: str
    answer: str | None
    text: str
    uncertainty: float | None = None


@dataclass
class SeaKRResult:
    """The outcome of answering one question.

    ``stop_reason`` says why the reasoning loop ended: ``answered``, ``max_steps``,
    ``max_docs``, ``repeated_query``, ``empty_step`` or ``no_documents``; ``single``
    in simple-QA mode. ``documents`` are the ids of the snippets read, in order.
    ``loop_answer`` is the answer the steps reached themselves (``None``: they reached
    none, and the answer was forced or selected); ``routes`` hold the
    final candidates when reasoning selection ran, ``chosen_route`` the one taken and
    ``selection_reason`` why (the selector's reason).
    """

    question: str
    mode: str
    answer: str = ""
    steps: list[Step] = field(default_factory=list)
    stop_reason: str = ""
    documents: list[str] = field(default_factory=list)
    retrieval_calls: int = 0
    loop_answer: str | None = None
    routes: list[Route] = field(default_factory=list)
    chosen_route: str | None = None
    selection_reason: str | None = None
    seconds: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return _json_ready(asdict(self))
