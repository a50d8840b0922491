"""The runtime budget over a stream of real questions whose difficulty shifts halfway.

An SKR-kNN gate (MiniLM, k=10, similarity weighting) remembers 250 AdaRAGUE NQ and 250
MuSiQue outcome records (Llama-3.1-8B answers). ``BudgetedGate`` holds it to a target
retrieval rate over a sliding window, calibrated on 200 NQ-open dev questions; the
stream is 300 unseen NQ-open dev questions, then the 250 unseen MuSiQue ones, decided
in batches of 10. Reported per target: the realised rate (whole stream, each half, the
highest and lowest full window), the retrievals the cap refused, where the drift flag
first rose, and the rate of the gate alone at its own threshold.

    .venv/bin/python benchmarks/budget_stream.py [--data DIR] [--targets 0.2 0.3] [--window 200]

Writes benchmarks/results/budget_stream.{md,json,png}.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np

from _common import RESULTS, adarague_path, add_data_argument, markdown_table, write_results
from adaptive_gates import BudgetedGate, SKRKnnGate, load_outcomes, load_qa
from adaptive_gates.models.defaults import default_embedder
from adaptive_gates.models.embedding.cached import CachedEmbedder

N_CALIBRATION, N_EASY, N_HARD, BATCH = 200, 300, 250, 10


def run_target(
    gate: SKRKnnGate, calibration: list[str], stream: list[str], target: float, window: int
) -> dict[str, Any]:
    budget = BudgetedGate(gate, target_rate=target, window=window).calibrate(calibration)
    decisions = [d for i in range(0, len(stream), BATCH) for d in budget.decide_batch(stream[i : i + BATCH])]
    retrieved = np.array([d.retrieve for d in decisions], dtype=float)
    windows = [retrieved[i - window : i].mean() for i in range(window, len(retrieved) + 1)]
    drift = [d.details["budget"]["drift"] for d in decisions]
    return {
        "target": target,
        "rate": float(retrieved.mean()),
        "rate_easy": float(retrieved[:N_EASY].mean()),
        "rate_hard": float(retrieved[N_EASY:].mean()),
        "max_window_rate": float(max(windows)),
        "min_window_rate": float(min(windows)),
        "capped": int(sum(d.details["budget"]["capped"] for d in decisions)),
        "first_drift": drift.index(True) if any(drift) else None,
        "drift_before_shift": any(drift[:N_EASY]),
        "sliding_rate": [float(retrieved[max(0, i - window) : i].mean()) for i in range(1, len(retrieved) + 1)],
        "drift_statistic": [d.details["budget"]["drift_statistic"] for d in decisions],
        "drift_threshold": decisions[-1].details["budget"]["drift_threshold"],
    }


def plot(runs: list[dict[str, Any]], gate_alone: np.ndarray, window: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    x = np.arange(1, len(gate_alone) + 1)
    alone = [gate_alone[max(0, i - window) : i].mean() for i in x]
    top.plot(x, alone, color="grey", lw=1, label="gate alone (own threshold)")
    for run, colour in zip(runs, ("tab:blue", "tab:orange", "tab:green")):
        top.plot(x, run["sliding_rate"], color=colour, lw=1.5, label=f"budget, target {run['target']:.2f}")
        top.axhline(run["target"], color=colour, ls="--", lw=1)
        stat = [np.nan if s is None else s for s in run["drift_statistic"]]
        bottom.plot(x, stat, color=colour, lw=1.2, label=f"KS D (target {run['target']:.2f})")
    bottom.axhline(runs[0]["drift_threshold"], color="black", ls=":", lw=1, label="drift threshold (α = 0.001)")
    for ax in (top, bottom):
        ax.axvline(N_EASY + 0.5, color="red", lw=1, alpha=0.6)
    top.set_ylabel(f"retrieval rate over the last {window} decisions")
    top.set_title("NQ-open questions, then MuSiQue (red line): realised retrieval rate")
    bottom.set_ylabel("KS statistic vs calibration")
    bottom.set_xlabel("decision")
    top.legend(fontsize=8, loc="upper left")
    bottom.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--targets", type=float, nargs="+", default=[0.2, 0.3])
    parser.add_argument("--window", type=int, default=200)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    nq = load_outcomes(adarague_path(args.data, "nq"))
    musique = load_outcomes(adarague_path(args.data, "musique"))
    dev = [r.question for r in load_qa(args.data / "nq_open_dev.jsonl")]
    gate = SKRKnnGate(CachedEmbedder(default_embedder()), k=10, weighting="similarity").fit_outcomes(
        nq[:250] + musique[:250]
    )
    calibration = dev[:N_CALIBRATION]
    stream = dev[N_CALIBRATION : N_CALIBRATION + N_EASY] + [r.question for r in musique[250 : 250 + N_HARD]]
    gate_alone = gate.retrieves(gate.score(stream)).astype(float)
    runs = [run_target(gate, calibration, stream, t, args.window) for t in args.targets]
    rows = [
        [
            r["target"],
            r["rate"],
            r["rate_easy"],
            r["rate_hard"],
            r["max_window_rate"],
            r["min_window_rate"],
            r["capped"],
            r["first_drift"],
            r["drift_before_shift"],
        ]
        for r in runs
    ]
    table = markdown_table(
        [
            "target",
            "realised rate",
            "NQ half",
            "MuSiQue half",
            "max window",
            "min window",
            "capped",
            "drift first flagged at",
            "drift before shift",
        ],
        rows,
    )
    alone = (
        f"The gate alone at its own threshold retrieves {gate_alone.mean():.3f} of the stream "
        f"({gate_alone[:N_EASY].mean():.3f} on the NQ half, {gate_alone[N_EASY:].mean():.3f} on the MuSiQue half)."
    )
    markdown = (
        f"# Budget over a shifting stream\n\nWindow {args.window}; the shift is at decision {N_EASY}.\n\n"
        f"{table}\n\n{alone}\n"
    )
    write_results("budget_stream", markdown, {"window": args.window, "gate_alone": gate_alone.tolist(), "runs": runs})
    plot(runs, gate_alone, args.window, RESULTS / "budget_stream.png")
    print(markdown)


if __name__ == "__main__":
    main()
