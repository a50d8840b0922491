"""How a gate's quality grows with the outcomes it learns from.

A user who collected a few hundred outcomes of their own LLM asks whether collecting
more would pay. The learning curve answers with their own data: subsets of growing
size (each drawn afresh per seed), each cross-fitted (``cross_fitted_scores``: every
record scored by a gate fitted on the other folds) and judged by its oracle-gap capture
(``evaluate_scores``), with the band random gates reach on subsets of that size
(``random_band``): a point inside the band is not yet distinguishable from chance, and
a curve still climbing at the right end says more outcomes would help.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..gates.base.folds import GateFactory, cross_fitted_scores
from ..records.data import OutcomeRecord
from ..records.selfknowledge import Labels
from .judging import graded_outcomes, judged_by
from .random_band import random_band
from .report import evaluate_scores

#: Seeds of a curve by default: the subset and the folds are drawn per seed; one fold
#: seed alone moves a figure on a few hundred questions by a few hundredths.
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2)
#: The smallest subset of a default curve, doubled until all records are used.
FIRST_SIZE = 50


@dataclass(frozen=True)
class LearningPoint:
    """One subset size: the gap capture of each seed's cross-fit (seeds where it is
    undefined, the oracle no better than random, are left out) and the 95% band of
    random gates on subsets of that size (the seeds' bounds averaged)."""

    size: int
    gap_captures: tuple[float, ...]
    random_band: tuple[float, float] | None

    @property
    def mean(self) -> float | None:
        """The seeds' mean gap capture (``None``: no seed had one)."""
        return float(np.mean(self.gap_captures)) if self.gap_captures else None

    @property
    def spread(self) -> float | None:
        """The seeds' standard deviation (``ddof=1``; 0 with one seed)."""
        if not self.gap_captures:
            return None
        return float(np.std(self.gap_captures, ddof=1)) if len(self.gap_captures) > 1 else 0.0


@dataclass(frozen=True)
class LearningCurve:
    """Gap capture against the number of outcomes a gate learned from."""

    gate: str
    metric: str
    labels: Labels
    judged_by: Labels
    folds: int
    seeds: tuple[int, ...]
    points: tuple[LearningPoint, ...]

    def to_dict(self) -> dict[str, Any]:
        """The curve as JSON values."""
        return {
            "gate": self.gate,
            "metric": self.metric,
            "labels": self.labels,
            "judged_by": self.judged_by,
            "folds": self.folds,
            "seeds": list(self.seeds),
            "points": [
                {
                    "size": p.size,
                    "gap_captures": list(p.gap_captures),
                    "mean": p.mean,
                    "spread": p.spread,
                    "random_band": None if p.random_band is None else list(p.random_band),
                }
                for p in self.points
            ],
        }

    def table(self) -> str:
        """The curve as a printed table, one line a size."""

        def num(value: float | None) -> str:
            return "n/a" if value is None else f"{value:+.3f}"

        seeds = ",".join(map(str, self.seeds))
        lines = [
            f"learning curve of {self.gate}: {self.folds}-fold cross-fitted gap capture, seeds {seeds} "
            f"({self.labels} labels, judged by {self.judged_by}, {self.metric})",
            f"{'outcomes':>9}  {'mean':>7}  {'spread':>6}  {'random 95%':>17}",
        ]
        for p in self.points:
            band = "n/a" if p.random_band is None else f"[{p.random_band[0]:+.3f}, {p.random_band[1]:+.3f}]"
            spread = "n/a" if p.spread is None else f"{p.spread:.3f}"
            lines.append(f"{p.size:>9}  {num(p.mean):>7}  {spread:>6}  {band:>17}")
        return "\n".join(lines)


def default_sizes(n: int, folds: int = 5) -> list[int]:
    """``FIRST_SIZE``, doubled while below ``n``, then ``n`` itself: e.g. 50, 100, 200,
    400, 500 for 500 records. None below what ``folds`` folds can split (two records a
    fold)."""
    smallest = 2 * folds
    if n < smallest:
        raise ValueError(f"{n} records are too few for a {folds}-fold learning curve (at least {smallest})")
    sizes, size = [], max(FIRST_SIZE, smallest)
    while size < n:
        sizes.append(size)
        size *= 2
    return [*sizes, n]


def learning_curve(
    factory: GateFactory,
    records: Sequence[OutcomeRecord],
    *,
    name: str,
    metric: str = "contains",
    labels: Labels = "gold",
    sizes: Sequence[int] | None = None,
    folds: int = 5,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    progress: bool = False,
) -> LearningCurve:
    """The gap capture of gates of ``factory`` fitted (on ``labels``) on subsets of
    ``records`` of each size in ``sizes`` (default ``default_sizes``): per seed, a
    subset drawn at random and cross-fitted in ``folds`` folds, all its records judged
    against gold answers when every record has some, else by agreement (``judging``).
    ``progress``: a progress bar over the fits' cross-fits."""
    from tqdm.auto import tqdm

    records = list(records)
    n = len(records)
    sizes = default_sizes(n, folds) if sizes is None else sorted(set(sizes))
    if not sizes or sizes[0] < 2 * folds or sizes[-1] > n:
        raise ValueError(f"sizes must lie in [{2 * folds}, {n}] for {folds} folds of {n} records, got {sizes}")
    if not seeds:
        raise ValueError("a learning curve needs at least one seed")
    judge = judged_by(records)
    a_all, b_all = graded_outcomes(records, metric, judge)
    points = []
    with tqdm(
        total=len(sizes) * len(seeds), desc=f"learning curve {name}", unit="cross-fit", disable=not progress
    ) as bar:
        for size in sizes:
            captures, bands = [], []
            for seed in seeds:
                pick = np.sort(np.random.default_rng(seed).permutation(n)[:size])
                subset = [records[i] for i in pick]
                scores = cross_fitted_scores(factory, subset, metric, folds, seed, labels=labels)
                a, b = a_all[pick], b_all[pick]
                capture = evaluate_scores(scores, a, b, gate=name, metric=metric)["gap_capture"]
                if capture is not None:
                    captures.append(float(capture))
                chance = random_band(a, b, seed=seed)["gap_capture"]
                if chance is not None:
                    bands.append(chance)
                bar.update()
            band = None
            if bands:
                low, high = np.mean(bands, axis=0)
                band = (float(low), float(high))
            points.append(LearningPoint(size, tuple(captures), band))
    return LearningCurve(name, metric, labels, judge, folds, tuple(seeds), tuple(points))
