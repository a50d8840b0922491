"""Whether the draft-check combiner should read the draft's agreement with the
passages, decided on the user's own outcome records.

On Llama-3.1-8B's short drafts "the draft occurs in a passage" was the strongest
signal a deployed gate could compute; on another model's long, parenthetical drafts
the same rule inverted (−0.18 of the oracle gap). So agreement enters a fit only once
the records show that it works for these drafts: the combiner is cross-fitted with and
without the agreement columns (``AGREEMENT_COLUMNS``) on a few folds, and the columns
are kept only when they raise the out-of-fold gap capture.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..combiner.features import FeatureCombiner

logger = logging.getLogger(__name__)

#: The draft-agreement columns (``signals.draft``) the check keeps or drops together.
AGREEMENT_COLUMNS: tuple[str, ...] = ("agree_any", "agree_top", "agree_share", "overlap_best")
#: Folds the check cross-fits over.
AGREEMENT_FOLDS = 3
#: Fewer records than this say too little to let agreement in: it stays out.
MIN_AGREEMENT_RECORDS = 60

#: Fits a combiner on feature rows, columns, outcomes without and with retrieval, and
#: embeddings (or ``None``).
FitCombiner = Callable[[np.ndarray, Sequence[str], np.ndarray, np.ndarray, "np.ndarray | None"], FeatureCombiner]


@dataclass(frozen=True)
class AgreementCheck:
    """The outcome of the check: whether agreement is ``used``, why (``reason``), and
    the out-of-fold gap capture with and without it (``None`` where not measured)."""

    used: bool
    reason: str
    with_agreement: float | None = None
    without_agreement: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object saved in the gate's state."""
        return {
            "used": self.used,
            "reason": self.reason,
            "gap_capture_with": self.with_agreement,
            "gap_capture_without": self.without_agreement,
        }

    @classmethod
    def from_dict(cls, value: object) -> AgreementCheck:
        """Read back ``to_dict``'s object (``ValueError`` naming what is wrong)."""
        if not isinstance(value, dict) or not isinstance(value.get("used"), bool):
            raise ValueError("must be an object whose 'used' is true or false")
        reason = value.get("reason")
        figures = [value.get("gap_capture_with"), value.get("gap_capture_without")]
        if not isinstance(reason, str) or any(
            f is not None and (isinstance(f, bool) or not isinstance(f, (int, float))) for f in figures
        ):
            raise ValueError("'reason' must be a string and the gap captures numbers or null")
        return cls(value["used"], reason, *(None if f is None else float(f) for f in figures))


def without_agreement(columns: Sequence[str]) -> tuple[str, ...]:
    """``columns`` without the agreement columns."""
    return tuple(c for c in columns if c not in AGREEMENT_COLUMNS)


def check_agreement(
    fit: FitCombiner,
    features: np.ndarray,
    columns: Sequence[str],
    a: np.ndarray,
    b: np.ndarray,
    embeddings: np.ndarray | None,
    *,
    folds: int = AGREEMENT_FOLDS,
    seed: int = 0,
) -> AgreementCheck:
    """Cross-fit the combiner (``fit``) with all ``columns`` and without the agreement
    ones, on the same ``folds`` of the rows, and keep agreement only when its
    out-of-fold gap capture is higher; logged either way."""
    n = len(a)
    if n < MIN_AGREEMENT_RECORDS:
        check = AgreementCheck(
            False, f"{n} records are too few to show that agreement helps (at least {MIN_AGREEMENT_RECORDS})"
        )
    else:
        fold = np.empty(n, dtype=np.int64)
        fold[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
        kept = without_agreement(columns)
        with_ = _out_of_fold_capture(fit, features, columns, columns, a, b, embeddings, fold)
        without = _out_of_fold_capture(fit, features, columns, kept, a, b, embeddings, fold)
        used = with_ > without
        how = "raises" if used else "does not raise"
        reason = (
            f"agreement {how} the out-of-fold gap capture ({with_:.3f} with it, {without:.3f} without; "
            f"{folds} folds of {n} records)"
        )
        check = AgreementCheck(used, reason, with_, without)
    logger.info("draft-check: the agreement columns are %s: %s", "used" if check.used else "left out", check.reason)
    return check


def _out_of_fold_capture(
    fit: FitCombiner,
    features: np.ndarray,
    columns: Sequence[str],
    used: Sequence[str],
    a: np.ndarray,
    b: np.ndarray,
    embeddings: np.ndarray | None,
    fold: np.ndarray,
) -> float:
    """The gap capture of the out-of-fold scores of combiners fitted on ``used`` columns."""
    take = [list(columns).index(c) for c in used]
    x = features[:, take]
    scores = np.empty(len(a), dtype=np.float64)
    for f in np.unique(fold):
        train, test = fold != f, fold == f
        combiner = fit(x[train], used, a[train], b[train], None if embeddings is None else embeddings[train])
        scores[test] = combiner.score(x[test], None if embeddings is None else embeddings[test])
    return gap_capture_of(scores, a, b)


def gap_capture_of(scores: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """The oracle-gap capture of need ``scores`` on outcomes ``a`` (without retrieval) and
    ``b`` (with), ties counted at their expected gain, as ``evaluation.curves`` does
    (0 = random, 1 = oracle; 0 when the oracle is no better than random)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    gain = b - a
    room = _auc(gain, a, gain) - (a.mean() + b.mean()) / 2
    if room <= 1e-12:
        return 0.0
    return float((_auc(np.asarray(scores, dtype=np.float64), a, gain) - (a.mean() + b.mean()) / 2) / room)


def _auc(scores: np.ndarray, a: np.ndarray, gain: np.ndarray) -> float:
    """Area under accuracy against retrieval rate, retrieving in descending score
    order, each run of equal scores at its mean gain."""
    order = np.argsort(-scores, kind="stable")
    s, g = scores[order], gain[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    sizes = np.diff(np.r_[starts, s.size])
    per_item = np.repeat(np.add.reduceat(g, starts) / sizes, sizes)
    accuracy = (a.sum() + np.r_[0.0, np.cumsum(per_item)]) / a.size
    return float(np.trapezoid(accuracy, np.arange(a.size + 1) / a.size))
