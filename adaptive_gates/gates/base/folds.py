"""Seeded K-fold splits and cross-fitted need scores, shared by evaluation and by the
gates that learn from out-of-fold scores (the stacked gate's members, the fitting
scores of Thrust and IAPEK-BM25), so all hold out the same items for the same seed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # gates are built by the factories given, never imported here
    from ...records.data import OutcomeRecord
    from ...records.selfknowledge import Labels
    from .gate import Gate

#: Makes a fresh, unfitted gate.
GateFactory = Callable[[], "Gate"]
#: A fold's gate, fitted on the records ``kept``, with the records it scored (``held_out``).
Fold = tuple["Gate", np.ndarray, np.ndarray]


def fold_splits(n: int, folds: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(kept, held_out)`` index arrays, one pair per fold: a seeded permutation of
    ``range(n)`` cut into ``folds`` nearly equal parts; ``kept`` is sorted."""
    if isinstance(folds, bool) or not isinstance(folds, int) or not 1 <= folds <= n:
        raise ValueError(f"folds must be an int in [1, {n}], got {folds!r}")
    order = np.random.default_rng(seed).permutation(n)
    for held_out in np.array_split(order, folds):
        yield np.setdiff1d(order, held_out), held_out


def fit_gate(
    factory: GateFactory,
    records: Sequence[OutcomeRecord],
    metric: str,
    *,
    labels: Labels = "gold",
    sources: Sequence[str] = (),
) -> Gate:
    """A fresh gate of ``factory`` fitted on outcome records, graded as ``labels`` says
    (``Gate.fit_outcomes``); ``sources`` name where the records came from. Each is
    passed only when not its default, so a gate whose ``fit_outcomes`` takes only
    ``(records, metric)`` still fits on gold labels."""
    extra: dict[str, Any] = {}
    if labels != "gold":
        extra["labels"] = labels
    if sources:
        extra["sources"] = tuple(sources)
    return factory().fit_outcomes(records, metric=metric, **extra)


def cross_fitted_folds(
    factory: GateFactory,
    records: Sequence[OutcomeRecord],
    metric: str = "contains",
    folds: int = 5,
    seed: int = 0,
    *,
    labels: Labels = "gold",
) -> tuple[np.ndarray, list[Fold]]:
    """Need scores of each record from a gate fitted (on ``labels``) on the other
    folds, and each fold's gate with the records it was fitted on and scored."""
    if folds < 2 or folds > len(records):
        raise ValueError(f"folds must be in [2, {len(records)}], got {folds}")
    scores = np.empty(len(records), dtype=np.float64)
    fitted: list[Fold] = []
    for kept, held_out in fold_splits(len(records), folds, seed):
        gate = fit_gate(factory, [records[i] for i in kept], metric, labels=labels)
        scores[held_out] = gate.score_records([records[i] for i in held_out])
        fitted.append((gate, kept, held_out))
    return scores, fitted


def cross_fitted_scores(
    factory: GateFactory,
    records: Sequence[OutcomeRecord],
    metric: str = "contains",
    folds: int = 5,
    seed: int = 0,
    *,
    labels: Labels = "gold",
) -> np.ndarray:
    """Need scores of each record from a gate fitted (on ``labels``) on the other folds."""
    return cross_fitted_folds(factory, records, metric, folds, seed, labels=labels)[0]
