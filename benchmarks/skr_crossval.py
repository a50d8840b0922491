"""5-fold cross-validation of the SKR gates on the six AdaRAGUE train splits.

For each split (500 outcome records) every gate variant is fitted on four folds
and scores the fifth (``cross_fitted_scores``, seeded, the same folds for every
variant); the pooled out-of-fold scores of all 500 questions give the SPEC §6
report: oracle-gap capture, decision AUROC and AUC. Each fold gate also decides
its held-out questions at its own rule threshold; those pooled decisions give the
realised retrieval rate and accuracy.

Variants: SKR-kNN with k in {5, 10, 20}, uniform (paper) or similarity weighting,
each decided by the paper's ratio rule and the authors' majority vote (the vote
only moves the threshold, not the ranking); SKR-cls (logistic regression on
MiniLM embeddings, plain and class-balanced). With ``--explore`` (default on)
also two kNN need scores that are *beyond the paper*, computed here only.

    .venv/bin/python benchmarks/skr_crossval.py [--data DIR] [--metric contains]

Writes benchmarks/results/skr_crossval.{md,json,png}.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm import tqdm

from _common import (
    ADARAGUE_SPLITS,
    RESULTS,
    adarague_path,
    add_data_argument,
    markdown_table,
    write_results,
)
from adaptive_gates import SKRClassifierGate, SKRKnnGate, label_outcomes, load_outcomes, outcome_scores
from adaptive_gates.evaluation import (
    cross_fitted_scores,
    evaluate_scores,
    null_gap_captures,
    threshold_outcome,
)
from adaptive_gates.gates.base.gate import Gate
from adaptive_gates.memory.memories import l2_normalise
from adaptive_gates.models.defaults import default_embedder
from adaptive_gates.models.embedding.cached import CachedEmbedder
from adaptive_gates.models.protocols import Embedder
from adaptive_gates.records.data import OutcomeRecord

FOLDS = 5


class NeighbourOutcomeGate(Gate):
    """Beyond the paper (benchmark only): kNN over *all* past questions.

    SKR drops the questions both answers got wrong and scores the share of
    "retrieval helped" among the rest. Here no question is dropped:

    - ``target="gain"``: need score = mean gain ``b - a`` of the k nearest past
      questions (P(helps) - P(hurts)); retrieve iff the expected gain is > 0;
    - ``target="helps"``: share of neighbours where retrieval helped, both-wrong
      questions kept as a third "no help" class; retrieve iff above the training
      share of "helps" (the analogue of SKR's ratio rule).
    """

    def __init__(self, embedder: Embedder, *, k: int, target: Literal["gain", "helps"]) -> None:
        super().__init__()
        self.embedder, self.k, self.target = embedder, k, target
        self._vectors: np.ndarray | None = None
        self._values = np.zeros(0)

    @property
    def is_fitted(self) -> bool:
        return self._vectors is not None

    def fit_outcomes(self, records: Sequence[OutcomeRecord], metric: str = "contains") -> NeighbourOutcomeGate:
        a, b = outcome_scores(records, metric)
        self._values = b - a if self.target == "gain" else (b > a).astype(np.float64)
        self._vectors = l2_normalise(self.embedder.embed([r.question for r in records]))
        return self

    def _default_threshold(self) -> float:
        return 0.0 if self.target == "gain" else float(self._values.mean())

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        sims = l2_normalise(self.embedder.embed(questions)) @ self._vectors.T
        k = min(self.k, sims.shape[1])
        nearest = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        return self._values[nearest].mean(axis=1), [{} for _ in questions]

    def _json_params(self) -> dict[str, Any]:
        return {"k": self.k, "target": self.target}

    def _save_state(self, directory: Path) -> dict[str, Any]:
        raise NotImplementedError("a benchmark-only gate")

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        raise NotImplementedError("a benchmark-only gate")


@dataclass(frozen=True)
class Variant:
    """A gate configuration; ``make(embedder, rule)`` builds one gate deciding by ``rule``."""

    name: str
    make: Callable[[Embedder, str], Gate]
    rules: tuple[str, ...]
    beyond_paper: bool = False


def variants(explore: bool) -> list[Variant]:
    out = [
        Variant(
            f"knn k={k} {weighting}",
            lambda e, rule, k=k, w=weighting: SKRKnnGate(e, k=k, vote=rule, weighting=w),
            ("ratio", "majority"),
        )
        for k in (5, 10, 20)
        for weighting in ("uniform", "similarity")
    ]
    out += [
        Variant("cls C=1", lambda e, _: SKRClassifierGate(e, C=1.0), ("p>0.5",)),
        Variant("cls C=1 balanced", lambda e, _: SKRClassifierGate(e, C=1.0, class_weight="balanced"), ("p>0.5",)),
    ]
    if explore:
        out += [
            Variant(
                f"knn-{target} k={k}",
                lambda e, _, k=k, t=target: NeighbourOutcomeGate(e, k=k, target=t),
                (rule,),
                beyond_paper=True,
            )
            for target, rule in (("gain", "gain>0"), ("helps", "share>prior"))
            for k in (10, 50)
        ]
    return out


def cross_fitted(
    factory: Callable[[], Gate], records: Sequence[OutcomeRecord], metric: str, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold need scores (the library's ``cross_fitted_scores``) and the
    out-of-fold decisions each fold gate takes at its own threshold."""
    questions = [r.question for r in records]
    if len(set(questions)) != len(questions):
        raise ValueError("decisions are matched back by question text, which must be unique")
    decided: dict[str, bool] = {}

    def recording_factory() -> Gate:
        gate = factory()
        score = gate.score

        def score_and_decide(batch: Sequence[str]) -> np.ndarray:
            scores = score(batch)
            decided.update(zip(batch, gate.retrieves(scores)))
            return scores

        gate.score = score_and_decide  # type: ignore[method-assign]
        return gate

    scores = cross_fitted_scores(recording_factory, records, metric, folds=FOLDS, seed=seed)
    return scores, np.array([decided[q] for q in questions])


def with_random_baseline(outcome: dict[str, float], a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Add the accuracy gain over a random gate retrieving at the same rate."""
    random_accuracy = a.mean() + outcome["retrieval_rate"] * (b.mean() - a.mean())
    return {**outcome, "accuracy_vs_random": float(outcome["accuracy"] - random_accuracy)}


def evaluate_split(
    records: list[OutcomeRecord], embedder: Embedder, metric: str, gate_variants: list[Variant], seed: int
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The split's baselines and per-variant results, plus each variant's full report (with curves)."""
    a, b = outcome_scores(records, metric)
    m, n = label_outcomes(records, metric).counts
    result: dict[str, Any] = {
        "n": len(records),
        "m_known": m,
        "n_unknown": n,
        "both_wrong": int(((a == 0) & (b == 0)).sum()),
    }
    reports: dict[str, dict[str, Any]] = {}
    gates: dict[str, Any] = {}
    for variant in tqdm(gate_variants, desc="variants", leave=False):
        decisions: dict[str, dict[str, float]] = {}
        scores = None
        for rule in variant.rules:
            rule_scores, retrieve = cross_fitted(lambda: variant.make(embedder, rule), records, metric, seed)
            if scores is not None and not np.array_equal(scores, rule_scores):
                raise AssertionError(f"{variant.name}: the vote changed the scores")
            scores = rule_scores
            decisions[rule] = with_random_baseline(threshold_outcome(retrieve, a, b), a, b)
        report = evaluate_scores(scores, a, b, gate=variant.name, metric=metric)
        reports[variant.name] = report
        gates[variant.name] = {
            "beyond_paper": variant.beyond_paper,
            "gap_capture": report["gap_capture"],
            "decision_auroc": report["decision_auroc"],
            "auc": report["auc"],
            "decisions": decisions,
        }
    first = next(iter(reports.values()))
    result.update({key: first[key] for key in ("never", "always", "oracle", "auc_random", "auc_oracle")})
    result["gates"] = gates
    return result, reports


def mean_over_splits(per_split: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The same structure averaged over data sets (n/a values skipped)."""

    def mean(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return float(np.mean(present)) if present else None

    splits = list(per_split.values())
    out: dict[str, Any] = {
        key: mean([s[key] for s in splits]) for key in ("never", "always", "oracle", "auc_random", "auc_oracle")
    }
    out["gates"] = {}
    for name, gate in splits[0]["gates"].items():
        out["gates"][name] = {
            "beyond_paper": gate["beyond_paper"],
            **{key: mean([s["gates"][name][key] for s in splits]) for key in ("gap_capture", "decision_auroc", "auc")},
            "decisions": {
                rule: {key: mean([s["gates"][name]["decisions"][rule][key] for s in splits]) for key in outcome}
                for rule, outcome in gate["decisions"].items()
            },
        }
    return out


def render(results: dict[str, Any]) -> str:
    """The markdown report: baselines, gap capture, AUROC and thresholded decisions."""
    splits = results["datasets"]
    columns = [*splits, "mean"]
    rows = {**splits, "mean": results["mean"]}
    names = list(results["mean"]["gates"])

    def label(name: str) -> str:
        return f"{name} (beyond paper)" if results["mean"]["gates"][name]["beyond_paper"] else name

    def per_gate(key: str, extra: Sequence[Sequence[Any]] = ()) -> str:
        table = [[label(g), *(rows[c]["gates"][g][key] for c in columns)] for g in names]
        return markdown_table(["gate", *columns], [*table, *extra])

    def rate_acc(outcome: dict[str, float]) -> str:
        return f"{outcome['retrieval_rate']:.2f} / {outcome['accuracy']:.3f} ({outcome['accuracy_vs_random']:+.3f})"

    null_row = [
        "random scores: 95% band",
        *("{:+.3f} .. {:+.3f}".format(*rows[c]["null_gap_capture_95"]) for c in columns),
    ]

    decision_rows = [
        ["never", "", *(f"0.00 / {rows[c]['never']:.3f}" for c in columns)],
        ["always", "", *(f"1.00 / {rows[c]['always']:.3f}" for c in columns)],
        ["oracle", "", *(f"- / {rows[c]['oracle']:.3f}" for c in columns)],
    ]
    for g in names:
        for rule in results["mean"]["gates"][g]["decisions"]:
            decision_rows.append([label(g), rule, *(rate_acc(rows[c]["gates"][g]["decisions"][rule]) for c in columns)])

    baselines = markdown_table(
        [
            "data set",
            "n",
            "known (D+)",
            "unknown (D-)",
            "both wrong",
            "never",
            "always",
            "oracle",
            "AUC random",
            "AUC oracle",
        ],
        [
            [
                c,
                s["n"],
                s["m_known"],
                s["n_unknown"],
                s["both_wrong"],
                s["never"],
                s["always"],
                s["oracle"],
                s["auc_random"],
                s["auc_oracle"],
            ]
            for c, s in splits.items()
        ],
    )
    return "\n\n".join(
        [
            f"# SKR gates, {FOLDS}-fold cross-validation (metric: {results['metric']}, encoder: {results['encoder']})",
            "Out-of-fold scores of all 500 questions per data set, pooled; folds seeded "
            f"({results['seed']}) and shared by every variant. 'mean' is the unweighted mean over the six data sets.",
            "## Outcomes and baselines\n\n" + baselines,
            "## Oracle-gap capture (0 = random, 1 = oracle)\n\n" + per_gate("gap_capture", [null_row]),
            "## Decision AUROC (need score vs. 'retrieval helps', b > a)\n\n" + per_gate("decision_auroc"),
            "## Thresholded decisions at each gate's own rule\n\n"
            "Cells: retrieval rate / accuracy (accuracy minus that of a random gate retrieving at the same rate).\n\n"
            + markdown_table(["gate", "rule", *columns], decision_rows),
        ]
    )


def plot(results: dict[str, Any], reports: dict[str, dict[str, dict[str, Any]]], path: Path) -> str:
    """Curves of the best paper variant (and best beyond-paper one) per data set; returns the best name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean_gates = results["mean"]["gates"]

    def best(beyond: bool) -> str | None:
        pool = [g for g, r in mean_gates.items() if r["beyond_paper"] == beyond]
        return max(pool, key=lambda g: mean_gates[g]["gap_capture"]) if pool else None

    shown = [g for g in (best(False), best(True)) if g is not None]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, (split, split_reports) in zip(axes.flat, reports.items()):
        base = split_reports[shown[0]]
        for g in shown:
            rates, acc = zip(*split_reports[g]["curve"])
            ax.plot(rates, acc, linewidth=1.6, label=f"{g} (beyond paper)" if mean_gates[g]["beyond_paper"] else g)
        rates, acc = zip(*base["oracle_curve"])
        ax.plot(rates, acc, color="black", linestyle=":", label="oracle")
        ax.plot([0, 1], [base["never"], base["always"]], color="grey", linestyle="--", label="random")
        captures = " / ".join(f"{split_reports[g]['gap_capture']:.3f}" for g in shown)
        ax.set_title(f"{split} (n={base['n']}): gap capture {captures}", fontsize=10)
        ax.set_xlim(0, 1)
        ax.set_xlabel("retrieval rate")
        ax.set_ylabel(f"accuracy ({results['metric']})")
        ax.grid(alpha=0.3)
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="lower center", ncol=4)
    fig.suptitle(f"SKR gates, {FOLDS}-fold out-of-fold curves vs random and oracle")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return shown[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument(
        "--metric", default="contains", choices=("contains", "em", "f1"), help="answer metric (default: contains)"
    )
    parser.add_argument("--seed", type=int, default=0, help="fold split and null-band seed (default: 0)")
    parser.add_argument("--no-explore", dest="explore", action="store_false", help="skip the beyond-paper variants")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    embedder = CachedEmbedder(default_embedder())
    gate_variants = variants(args.explore)
    results: dict[str, Any] = {
        "metric": args.metric,
        "folds": FOLDS,
        "seed": args.seed,
        "encoder": embedder.model_id,
        "datasets": {},
    }
    reports: dict[str, dict[str, dict[str, Any]]] = {}
    nulls: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(args.seed)
    for split in tqdm(ADARAGUE_SPLITS, desc="data sets"):
        records = load_outcomes(adarague_path(args.data, split))
        embedder.embed([r.question for r in records])  # once per split; every variant reuses it
        results["datasets"][split], reports[split] = evaluate_split(
            records, embedder, args.metric, gate_variants, args.seed
        )
        nulls[split] = null_gap_captures(*outcome_scores(records, args.metric), rng)
    results["mean"] = mean_over_splits(results["datasets"])
    nulls["mean"] = np.mean(list(nulls.values()), axis=0)
    for name, draws in nulls.items():
        target = results["mean"] if name == "mean" else results["datasets"][name]
        target["null_gap_capture_95"] = [float(q) for q in np.percentile(draws, [2.5, 97.5])]

    markdown = render(results)
    png = RESULTS / "skr_crossval.png"
    RESULTS.mkdir(parents=True, exist_ok=True)
    best = plot(results, reports, png)
    markdown += f"\n\nPlot: `{png.relative_to(RESULTS.parent)}` (best paper variant by mean gap capture: {best})."
    print(markdown)
    for path in write_results("skr_crossval", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
