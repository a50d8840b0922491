"""Accuracy-against-retrieval-rate plots of evaluation reports, and how plots are written."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..models.optional import require
from ..persistence.atomic_file import replaced_whole


def check_plot_path(path: str | Path) -> None:
    """Raise ``ValueError`` unless ``path`` ends in a suffix naming a format matplotlib
    writes (``.png``, ``.pdf``, ``.svg``...): the suffix picks the format, and a file
    name without one would be written under another name (matplotlib adds ``.png``).
    ``.pgf`` also needs the TeX program matplotlib lays its text out with."""
    matplotlib = require("matplotlib", extra="plot")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise ValueError(
            f"{path}: not a plot format matplotlib writes; end the file name in one of "
            + ", ".join(f".{name}" for name in sorted(formats))
        )
    tex = matplotlib.rcParams["pgf.texsystem"]
    if suffix == "pgf" and shutil.which(tex) is None:
        raise ValueError(f"{path}: matplotlib writes .pgf with {tex}, which is not installed")


def plot_reports(reports: Sequence[dict[str, Any]], path: str | Path, title: str | None = None) -> Path:
    """Plot one or more gates' curves with random, oracle, never and always.

    The baselines come from the first report (all reports should share a test set),
    as does the accuracy band of random gates when it holds a ``random_band``
    (``random_band(a, b, retrieve)``). The suffix of ``path`` picks the format
    (``check_plot_path``).
    """
    check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not reports:
        raise ValueError("nothing to plot: no reports given")
    base = reports[0]
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for report in reports:
        rates, acc = zip(*report["curve"])
        gc = report["gap_capture"]
        label = f"{report['gate']} (gap capture {gc:.2f})" if gc is not None else report["gate"]
        ax.plot(rates, acc, label=label, linewidth=1.6)
        at = report.get("at_threshold") or {}
        if "retrieval_rate" in at:
            ax.scatter([at["retrieval_rate"]], [at["accuracy"]], zorder=3, marker="o", s=30)
    band = base.get("random_band") or {}
    if "accuracy" in band:
        # Where 95% of random gates retrieving as often as the gate land.
        low, high = band["accuracy"]
        rate = band["retrieval_rate"]
        ax.plot(
            [rate, rate],
            [low, high],
            color="grey",
            linewidth=4,
            alpha=0.5,
            solid_capstyle="butt",
            label=f"random gates at that rate ({band['level']:.0%})",
        )
    rates, acc = zip(*base["oracle_curve"])
    ax.plot(rates, acc, color="black", linestyle=":", label="oracle")
    ax.plot([0, 1], [base["never"], base["always"]], color="grey", linestyle="--", label="random")
    ax.scatter([0], [base["never"]], color="tab:red", marker="s", zorder=4, label=f"never ({base['never']:.3f})")
    ax.scatter([1], [base["always"]], color="tab:green", marker="s", zorder=4, label=f"always ({base['always']:.3f})")
    ax.set_xlabel("retrieval rate")
    ax.set_ylabel(f"accuracy ({base['metric']})")
    ax.set_xlim(0, 1)
    ax.set_title(title or f"accuracy vs retrieval rate (n={base['n']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return save_figure(fig, path)


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write a matplotlib figure whole to ``path`` in the format its suffix names (a
    failed write leaves the old plot, or none), then close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    try:
        with replaced_whole(path) as fh:
            fig.savefig(fh, format=path.suffix.lstrip(".").lower(), dpi=120)
    finally:
        plt.close(fig)
    return path
