"""Seeded K-fold splits, shared by cross-fitted evaluation and the gates' own
cross-fitted fitting scores, so both hold out the same items for the same seed."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def fold_splits(n: int, folds: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(kept, held_out)`` index arrays, one pair per fold: a seeded permutation of
    ``range(n)`` cut into ``folds`` nearly equal parts; ``kept`` is sorted."""
    if isinstance(folds, bool) or not isinstance(folds, int) or not 1 <= folds <= n:
        raise ValueError(f"folds must be an int in [1, {n}], got {folds!r}")
    order = np.random.default_rng(seed).permutation(n)
    for held_out in np.array_split(order, folds):
        yield np.setdiff1d(order, held_out), held_out
