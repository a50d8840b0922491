"""Collecting self-knowledge (SPEC §1.1): answer each question without and with
retrieval and keep both answers as outcome records.

Records are appended to the output file batch by batch, so an interrupted run
resumes where it stopped: questions whose id is already in the file are skipped, and
a record the interruption cut short is set aside (see ``recover_torn_tail``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .answering import Answerer
from .data import OutcomeRecord, QARecord, load_outcomes, recover_torn_tail, write_jsonl
from .retrieval.base import Retriever

logger = logging.getLogger(__name__)


def collect_outcomes(
    records: Sequence[QARecord],
    answerer: Answerer,
    retriever: Retriever,
    out_path: str | Path,
    *,
    k: int = 3,
    batch_size: int = 8,
    progress: bool = True,
) -> list[OutcomeRecord]:
    """Answer every record without and with its top-``k`` passages.

    Returns all outcome records of ``out_path`` that belong to ``records``,
    in the order of ``records`` (earlier runs' included).
    """
    from tqdm.auto import tqdm

    out_path = Path(out_path)
    ids = [r.id for r in records]
    repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
    if repeated:
        raise ValueError(
            f"QA records must have unique ids to be collected resumably; repeated: {', '.join(map(repr, repeated))}"
        )
    done: dict[str, OutcomeRecord] = {}
    if out_path.exists():
        recover_torn_tail(out_path)  # an interrupted run may have stopped inside a record
        if out_path.stat().st_size:
            done = {r.id: r for r in load_outcomes(out_path)}
    todo = [r for r in records if r.id not in done]
    if done:
        logger.info("%s: resuming, %d of %d already collected", out_path, len(records) - len(todo), len(records))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tqdm(total=len(todo), desc="collecting outcomes", unit="q", disable=not progress) as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            questions = [r.question for r in batch]
            hits = retriever.search_batch(questions, k=k)
            without = answerer.answer_batch(questions)
            with_ = answerer.answer_batch(questions, [[h.as_passage() for h in row] for row in hits])
            new = [
                OutcomeRecord(
                    id=r.id,
                    question=r.question,
                    answers=list(r.answers),
                    pred_no_retrieval=a0,
                    pred_one_retrieval=a1,
                    extra={"retrieved": [h.id for h in row]},
                )
                for r, a0, a1, row in zip(batch, without, with_, hits)
            ]
            write_jsonl(out_path, [o.to_json() for o in new], append=True)
            done.update({o.id: o for o in new})
            bar.update(len(batch))
    return [done[i] for i in ids]
