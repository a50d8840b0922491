"""The plot of a learning curve: gap capture against the outcomes a gate learned from."""

from __future__ import annotations

from pathlib import Path

from .learning_curve import LearningCurve
from .plot import check_plot_path, save_figure


def plot_learning_curve(curve: LearningCurve, path: str | Path, title: str | None = None) -> Path:
    """Plot each size's mean gap capture with its spread over seeds (error bars), each
    seed's figure (dots), and the band of random gates on subsets of that size (grey),
    so a user sees whether more outcomes would help and where chance ends. The suffix
    of ``path`` picks the format (``check_plot_path``)."""
    check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # (size, mean, spread, each seed's figure) of the sizes with a gap capture
    points = [(p.size, mean, p.spread or 0.0, p.gap_captures) for p in curve.points if (mean := p.mean) is not None]
    if not points:
        raise ValueError("nothing to plot: no size of the learning curve has a gap capture")
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    banded = [p for p in curve.points if p.random_band is not None]
    if banded:
        ax.fill_between(
            [p.size for p in banded],
            [p.random_band[0] for p in banded if p.random_band is not None],
            [p.random_band[1] for p in banded if p.random_band is not None],
            color="grey",
            alpha=0.25,
            label="random gates (95%)",
        )
    for size, _, _, captures in points:
        ax.scatter([size] * len(captures), captures, color="tab:blue", alpha=0.35, s=12)
    ax.errorbar(
        [size for size, *_ in points],
        [mean for _, mean, *_ in points],
        yerr=[spread for _, _, spread, _ in points],
        color="tab:blue",
        marker="o",
        capsize=3,
        linewidth=1.6,
        label=f"{curve.gate}: mean ± sd over {len(curve.seeds)} seeds",
    )
    ax.axhline(0.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks([p.size for p in curve.points], [str(p.size) for p in curve.points])
    ax.set_xlabel("outcome records learned from")
    ax.set_ylabel(f"gap capture ({curve.folds}-fold cross-fitted)")
    ax.set_title(title or f"{curve.gate}: learning curve ({curve.labels} labels, judged by {curve.judged_by})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return save_figure(fig, path)
