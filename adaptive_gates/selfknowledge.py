"""Self-knowledge (SPEC §1.1): which past questions the LLM knows.

``outcome_scores`` grades the answers of outcome records; ``label_outcomes``
turns them into D+ (known: answer directly) / D- (unknown: retrieve) labels.
Collecting new outcome records with an LLM and a retriever lives in
``adaptive_gates.collection``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .data import OutcomeRecord
from .metrics import get_metric

#: Label values: a question the LLM answers as well without retrieval (D+) or
#: one where retrieval helped (D-).
KNOWN, UNKNOWN = 0, 1

TiePolicy = Literal["known", "drop"]


@dataclass(frozen=True)
class SelfKnowledge:
    """Labelled questions: ``labels[i]`` is 0 (known, D+) or 1 (unknown, D-)."""

    ids: list[str]
    questions: list[str]
    labels: list[int]

    @property
    def counts(self) -> tuple[int, int]:
        """``(m, n)`` = (|D+|, |D-|)."""
        n = sum(self.labels)
        return len(self.labels) - n, n


def outcome_scores(records: Sequence[OutcomeRecord], metric: str = "contains") -> tuple[np.ndarray, np.ndarray]:
    """Per-record scores of the answer without (``a``) and with (``b``) retrieval."""
    fn = get_metric(metric)
    a = np.array([fn(r.pred_no_retrieval, r.answers) for r in records], dtype=np.float64)
    b = np.array([fn(r.pred_one_retrieval, r.answers) for r in records], dtype=np.float64)
    return a, b


def label_outcomes(
    records: Sequence[OutcomeRecord],
    metric: str = "contains",
    ties: TiePolicy = "known",
) -> SelfKnowledge:
    """D+/D- labels from outcome records.

    Paper rule (``ties="known"``): known when E(no retrieval) >= E(retrieval),
    unknown otherwise, and questions both answers get wrong are dropped. The
    authors' code (``ties="drop"``) drops every tie, both-right included.
    """
    if ties not in ("known", "drop"):
        raise ValueError(f"ties must be 'known' or 'drop', got {ties!r}")
    a, b = outcome_scores(records, metric)
    ids, questions, labels = [], [], []
    for record, without, with_ in zip(records, a, b):
        if without == 0 and with_ == 0:
            continue
        if ties == "drop" and without == with_:
            continue
        ids.append(record.id)
        questions.append(record.question)
        labels.append(KNOWN if without >= with_ else UNKNOWN)
    return SelfKnowledge(ids, questions, labels)
