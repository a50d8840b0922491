"""Running a ``SeaKRPipeline`` over a QA set: scoring, a resumable checkpoint and
the run's report (EM, F1, retrieval calls, settings, one traced row per question)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..records.answer_metrics import exact_match, token_f1
from ..records.data import QARecord, iter_jsonl, recover_torn_tail, write_jsonl
from ..retrieval.base import Retriever
from .pipeline import SeaKRPipeline

if TYPE_CHECKING:
    from ..models.protocols import ProbingLM
    from .uncertainty import SelfAwareUncertainty

__all__ = ["run_pipeline", "summarize"]

logger = logging.getLogger(__name__)


def run_pipeline(
    records: Sequence[QARecord],
    retriever: Retriever,
    *,
    lm: ProbingLM | None = None,
    uncertainty: SelfAwareUncertainty | None = None,
    target_rate: float | None = None,
    calibration_questions: Sequence[str] | None = None,
    checkpoint: str | Path | None = None,
    progress: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """Answer QA ``records`` with a ``SeaKRPipeline(retriever, lm, uncertainty=…, **options)``
    and score them: EM, F1, retrieval calls, and one row per question with its trace.

    δ: ``threshold=`` among the options, or ``target_rate`` with ``calibration_questions``
    (``SeaKRPipeline.calibrate`` on them before the run). The multi-hop mode needs one;
    a missing or doubly given δ is refused before any work.

    A question whose run fails gets an empty prediction and its ``error``; the others go
    on. With ``checkpoint`` (JSONL) each row is appended as soon as it is done and rows
    already there are reused, so an interrupted run resumes where it stopped.
    """
    from tqdm.auto import tqdm

    if not records:
        raise ValueError("no QA records to run")
    pipeline = SeaKRPipeline(retriever, lm, uncertainty=uncertainty, **options)
    if (target_rate is None) != (calibration_questions is None):
        raise ValueError(
            "target_rate and calibration_questions go together: δ is calibrated for the target rate on those questions"
        )
    if target_rate is None:
        pipeline.check_ready()
    else:
        if pipeline.threshold is not None:
            raise ValueError("give threshold= or target_rate with calibration_questions, not both")
        if isinstance(target_rate, bool) or not isinstance(target_rate, (int, float)) or not 0 <= target_rate <= 1:
            raise ValueError(f"target_rate must be a number in [0, 1], got {target_rate!r}")
        if isinstance(calibration_questions, str) or not calibration_questions:
            raise ValueError("calibration_questions must be a non-empty sequence of questions")
    done = _read_checkpoint(checkpoint, records)
    todo = [r for r in records if r.id not in done]
    if done:
        logger.info("%s: resuming, %d of %d done", checkpoint, len(records) - len(todo), len(records))
    if target_rate is not None and calibration_questions is not None:  # given together, as checked above
        pipeline.calibrate(calibration_questions, target_rate)
    if checkpoint is not None:
        Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
    for record in tqdm(todo, desc=f"seakr {pipeline.mode}", unit="q", disable=not progress):
        done[record.id] = row = _score(record, pipeline)
        if checkpoint is not None:
            write_jsonl(checkpoint, [row], append=True)
    rows = [done[r.id] for r in records]
    return {
        **summarize(rows),
        "mode": pipeline.mode,
        "model": pipeline.lm.model_id,
        "uncertainty": pipeline.uncertainty.get_params(),
        # δ = ±inf (always / never retrieve) is written as a string: JSON has no infinity.
        "settings": {
            k: v if not isinstance(v, float) or math.isfinite(v) else str(v)
            for k, v in ((k, getattr(pipeline, k)) for k in _SETTINGS)
        }
        | {"demos": len(pipeline.demos)},
        "calibration": None if pipeline.calibration_ is None else pipeline.calibration_.to_dict(),
        "results": rows,
    }


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """EM, F1, retrieval calls, errors and seconds per question over scored rows (each
    with ``em``, ``f1``, ``retrieval_calls``, ``error``, ``seconds``)."""
    n = len(rows)
    if n == 0:
        raise ValueError("no rows to summarise")
    calls = sum(r["retrieval_calls"] for r in rows)
    return {
        "n": n,
        "em": sum(r["em"] for r in rows) / n,
        "f1": sum(r["f1"] for r in rows) / n,
        "retrieval_calls": calls,
        "retrieval_calls_per_question": calls / n,
        "errors": sum(r["error"] is not None for r in rows),
        "seconds_per_question": sum(r["seconds"] for r in rows) / n,
    }


_SETTINGS = (
    "threshold",
    "rerank",
    "select",
    "rationale",
    "n_candidates",
    "max_steps",
    "max_docs",
    "theta",
    "step_tokens",
    "answer_tokens",
    "max_doc_chars",
)


def _score(record: QARecord, pipeline: SeaKRPipeline) -> dict[str, Any]:
    """One question's row; an exception becomes the row's ``error``, not the run's end."""
    start = time.perf_counter()
    try:
        result = pipeline.answer(record.question)
    except Exception as exc:  # a failing model or retriever must not end a long run
        logger.warning("question %s failed: %s", record.id, exc)
        return {
            "id": record.id,
            "question": record.question,
            "answers": list(record.answers),
            "prediction": "",
            "em": 0.0,
            "f1": 0.0,
            "retrieval_calls": 0,
            "seconds": time.perf_counter() - start,
            "error": f"{type(exc).__name__}: {exc}",
            "trace": None,
        }
    return {
        "id": record.id,
        "question": record.question,
        "answers": list(record.answers),
        "prediction": result.answer,
        "em": exact_match(result.answer, record.answers),
        "f1": token_f1(result.answer, record.answers),
        "retrieval_calls": result.retrieval_calls,
        "seconds": result.seconds,
        "error": None,
        "trace": result.to_dict(),
    }


def _read_checkpoint(path: str | Path | None, records: Sequence[QARecord]) -> dict[str, dict[str, Any]]:
    """Rows of ``path`` that belong to ``records`` (by id); empty without a file. A row
    cut short by an interrupted run is set aside (see ``recover_torn_tail``)."""
    ids = [r.id for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError("QA records must have unique ids")
    if path is None or not Path(path).is_file():
        return {}
    recover_torn_tail(path)  # an interrupted run may have left half a row
    wanted = set(ids)
    return {row["id"]: row for _, row in iter_jsonl(path) if row.get("id") in wanted}
