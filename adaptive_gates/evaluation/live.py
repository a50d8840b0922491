"""Live evaluation: the LLM answers each question with and without retrieval here and
now, the gate decides, and the report is the offline one plus the alignment metrics.

Gates that need the LLM itself (verbalized confidence, SKR prompt/icl, SeaKR) are
judged this way. A gate that already answered while deciding
(``GateDecision.answer_without_retrieval``) is not asked again: its draft is the answer
without retrieval, whatever it decided.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..answering.answerer import Answerer
from ..gates.base.gate import Gate
from ..records.answer_metrics import get_metric
from ..records.data import QARecord
from ..records.decision import GateDecision
from ..retrieval.base import Retriever
from .alignment import alignment_metrics
from .report import evaluate_scores
from .units import lm_calls_per_decision

logger = logging.getLogger(__name__)


def evaluate_live(
    gate: Gate,
    records: Sequence[QARecord],
    retriever: Retriever,
    answerer: Answerer,
    *,
    k: int = 3,
    metric: str = "contains",
    target_rate: float | None = None,
    batch_size: int = 8,
    progress: bool = True,
) -> dict[str, Any]:
    """Run ``gate`` and ``answerer`` on ``records`` and report (SPEC §6 and §3).

    Every question is answered both ways so the whole accuracy-vs-retrieval curve can
    be drawn; ``at_threshold`` and ``alignment`` use the gate's actual decisions
    ("uncertain" = retrieve). Fallback decisions (no score) rank by their decision.
    ``lm_calls`` counts the LLM calls the gate made (``GateDecision.llm_calls``) plus
    the answer on the branch it chose (none when its draft is the answer). The report
    adds ``fallbacks``, ``llm_answer_calls`` (answers the gate's drafts saved), timings
    and one row per question.
    """
    from tqdm.auto import tqdm

    run = _LiveRun()
    with tqdm(total=len(records), desc=f"live {gate.name}", unit="q", disable=not progress) as bar:
        for start in range(0, len(records), batch_size):
            batch = records[start : start + batch_size]
            run.add_batch(gate, [r.question for r in batch], retriever, answerer, k)
            bar.update(len(batch))
    return _report(gate, records, run, k=k, metric=metric, target_rate=target_rate)


@dataclass
class _LiveRun:
    """What a live run gathers, question by question: the gate's decisions, the answers
    without and with passages, the passages' ids, the answers the gate's drafts could
    not save, and where the time went."""

    decisions: list[GateDecision] = field(default_factory=list)
    direct: list[str] = field(default_factory=list)
    grounded: list[str] = field(default_factory=list)
    retrieved: list[list[str]] = field(default_factory=list)
    direct_calls: int = 0
    timing: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("gate_s", "direct_answer_s", "retrieval_s", "grounded_answer_s"), 0.0)
    )

    def add_batch(self, gate: Gate, questions: list[str], retriever: Retriever, answerer: Answerer, k: int) -> None:
        """Decide a batch, answer it without retrieval (where the gate left no draft) and
        with the top ``k`` passages, timing each part."""
        with self._timed("gate_s"):
            decisions = gate.decide_batch(questions)
        drafts = [_draft(d) for d in decisions]
        missing = [i for i, draft in enumerate(drafts) if draft is None]
        with self._timed("direct_answer_s"):
            fresh = dict(zip(missing, answerer.answer_batch([questions[i] for i in missing]))) if missing else {}
        self.direct_calls += len(missing)
        # A gate that retrieved while deciding is answered over those passages.
        unsearched = [i for i, d in enumerate(decisions) if d.passages is None]
        with self._timed("retrieval_s"):
            found = retriever.search_batch([questions[i] for i in unsearched], k=k) if unsearched else []
        searched = dict(zip(unsearched, found))
        hits = [list(d.passages) if d.passages is not None else searched[i] for i, d in enumerate(decisions)]
        with self._timed("grounded_answer_s"):
            with_passages = answerer.answer_batch(questions, [[h.as_passage() for h in row] for row in hits])
        self.decisions.extend(decisions)
        self.direct.extend(draft if draft is not None else fresh[i] for i, draft in enumerate(drafts))
        self.grounded.extend(with_passages)
        self.retrieved.extend([h.id for h in row] for row in hits)

    @contextlib.contextmanager
    def _timed(self, part: str) -> Iterator[None]:
        clock = time.perf_counter()
        try:
            yield
        finally:
            self.timing[part] += time.perf_counter() - clock


def _report(
    gate: Gate, records: Sequence[QARecord], run: _LiveRun, *, k: int, metric: str, target_rate: float | None
) -> dict[str, Any]:
    """The offline report of the run's answers, with the live figures and one row per question."""
    score_answer = get_metric(metric)
    decisions = run.decisions
    a = np.array([score_answer(p, r.answers) for p, r in zip(run.direct, records)], dtype=np.float64)
    b = np.array([score_answer(p, r.answers) for p, r in zip(run.grounded, records)], dtype=np.float64)
    flags = np.array([d.retrieve for d in decisions], dtype=bool)
    report = evaluate_scores(
        _ranking_scores(decisions),
        a,
        b,
        gate=gate.name,
        metric=metric,
        retrieve=flags,
        target_rate=target_rate,
        lm_calls=_lm_calls(gate, decisions, flags),
        retrieves_first=gate.retrieves_first,
    )
    n = max(len(records), 1)
    report.update(
        mode="live",
        k=k,
        threshold=gate.threshold_,
        fallbacks=sum(d.is_fallback for d in decisions),
        llm_answer_calls=run.direct_calls,
        drafts_reused=len(records) - run.direct_calls,
        alignment=alignment_metrics(flags, a),
        seconds_per_question={key.removesuffix("_s"): value / n for key, value in run.timing.items()},
        questions=[
            {
                "id": r.id,
                "question": r.question,
                "answers": list(r.answers),
                "retrieve": d.retrieve,
                "score": d.to_dict()["score"],
                "answer_without": p0,
                "answer_with": p1,
                "correct_without": float(x),
                "correct_with": float(y),
                "retrieved": ids,
                "error": d.error,
                "llm_calls": d.llm_calls,
                "details": d.details,
            }
            for r, d, p0, p1, x, y, ids in zip(records, decisions, run.direct, run.grounded, a, b, run.retrieved)
        ],
    )
    return report


def _lm_calls(gate: Gate, decisions: Sequence[GateDecision], retrieve: np.ndarray) -> np.ndarray:
    """LM calls per question at the gate's decisions: the calls it reports making
    (``GateDecision.llm_calls``, else one for an answer-first gate), plus the answer."""
    answers_first = getattr(gate, "answers_first", False)
    return lm_calls_per_decision(
        retrieve,
        gate_calls=[float(answers_first) if d.llm_calls is None else d.llm_calls for d in decisions],
        drafts=[_draft(d) is not None for d in decisions],
    )


def _ranking_scores(decisions: Sequence[GateDecision]) -> np.ndarray:
    """Need scores for the curve; a fallback (no score) ranks above every scored
    question when it retrieves, below them when it does not."""
    finite = [d.score for d in decisions if math.isfinite(d.score)]
    top, bottom = (max(finite) + 1.0, min(finite) - 1.0) if finite else (1.0, -1.0)
    return np.array(
        [d.score if math.isfinite(d.score) else (top if d.retrieve else bottom) for d in decisions],
        dtype=np.float64,
    )


def _draft(decision: GateDecision) -> str | None:
    """The answer the gate already got without retrieval, when it is a non-empty one."""
    draft = decision.answer_without_retrieval
    return draft if draft is not None and draft.strip() else None
