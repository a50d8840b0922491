"""Self-knowledge (SPEC §1.1): which past questions the LLM knows.

``outcome_scores`` grades the answers of outcome records; ``label_outcomes``
turns them into D+ (known: answer directly) / D- (unknown: retrieve) labels.

Labels come from gold answers, or, where a user has none, from agreement
(``agreement_records``): the model's own answer over the passages is the reference,
so a question is "helped" when retrieval would change the answer.
Collecting new outcome records with an LLM and a retriever lives in
``adaptive_gates.answering.collection``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from .answer_metrics import get_metric
from .data import OutcomeRecord

#: Label values: a question the LLM answers as well without retrieval (D+) or
#: one where retrieval helped (D-).
KNOWN, UNKNOWN = 0, 1

TiePolicy = Literal["known", "drop"]
#: How outcome records are graded: against their gold ``answers``, or against the
#: answer with retrieval (``agreement_records``).
Labels = Literal["gold", "agreement"]
LABELS: tuple[Labels, ...] = ("gold", "agreement")


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


def agreement_records(records: Sequence[OutcomeRecord]) -> list[OutcomeRecord]:
    """The records with the answer over the passages as their only gold answer.

    Graded so, the answer with retrieval is right by definition (unless empty) and the
    answer without it is right when it agrees: retrieval "helps" exactly where it would
    change the answer. No gold answer is read, so plain questions a user collected
    (``adaptive-gates collect``) can be fitted on. It is a proxy, with measured limits:
    a gate fitted on it learns where retrieval changes the answer, not where it
    corrects it (docs: "Fit a gate to your model"). Fit gates with two heads on the
    ``"helps"`` target: correctness with retrieval is constant here.
    """
    return [replace(r, answers=[r.pred_one_retrieval]) for r in records]


def labelled_records(records: Sequence[OutcomeRecord], labels: Labels) -> list[OutcomeRecord]:
    """``records`` graded as ``labels`` says (``"gold"``: as they are)."""
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
    return agreement_records(records) if labels == "agreement" else list(records)
