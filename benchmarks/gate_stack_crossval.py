"""5-fold cross-validation of the popularity gate, the stacked gate and every single
member gate on the six AdaRAGUE train splits.

Same protocol as ``skr_crossval.py`` (same folds, seed 0): each gate is fitted on four
folds of a split (``gate.fit_outcomes``) and scores the fifth; the pooled out-of-fold
scores of the 500 questions give the SPEC §6 figures (gap capture, its 95% band for
random scores, decision AUROC, AUC). A stacked gate fitted on four folds cross-fits
its members *inside* those four folds, so the held-out fold is never seen by a
member or by the combiner.

Variants: the members alone (SKR-kNN k=10 similarity-weighted and the balanced SKR
classifier on MiniLM, Thrust on MiniLM, IAPEK-BM25, the popularity gate under each
rule); the stacked gate with the gain target (default) and the "retrieval helps"
target, without the question features, with question features only, and with a
weaker or stronger regularisation, with the two best members only, and *pooled*:
fitted on the four training folds plus all 2,500 rows of the other five data sets
(the held-out fold is still never seen). Questions are embedded once; a member fitted on the same
rows is shared by the stacked variants (its fit is deterministic), which changes no
figure and saves most of the time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gate_stack_crossval.py [--data DIR] [--metric contains]

Writes benchmarks/results/gate_stack_crossval.{md,json}.
"""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm import tqdm

from _common import ADARAGUE_SPLITS, adarague_path, add_data_argument, markdown_table, write_results
from adaptive_gates import (
    BM25DifficultyGate,
    CachedEmbedder,
    PopularityGate,
    SKRClassifierGate,
    SKRKnnGate,
    StackedGate,
    ThrustGate,
    load_outcomes,
    outcome_scores,
)
from adaptive_gates.data import OutcomeRecord
from adaptive_gates.evaluation import cross_fitted_scores, evaluate_scores, null_gap_captures
from adaptive_gates.folds import fold_splits
from adaptive_gates.gates import stacked
from adaptive_gates.gates.base import Gate
from adaptive_gates.models.defaults import default_embedder
from adaptive_gates.models.protocols import Embedder

FOLDS = 5

Factory = Callable[[Embedder], Gate]

#: name -> (kind, factory); kind groups the table: member gates, popularity rules, stacked.
VARIANTS: dict[str, tuple[str, Factory]] = {
    "skr-knn (k=10, similarity)": ("member", lambda e: SKRKnnGate(e, k=10, weighting="similarity")),
    "skr-cls (balanced)": ("member", lambda e: SKRClassifierGate(e, class_weight="balanced")),
    "thrust (MiniLM)": ("member", lambda e: ThrustGate(e, fit_scores="in_sample")),
    "bm25-difficulty": ("member", lambda e: BM25DifficultyGate()),
    **{
        f"popularity rule={rule}": ("popularity", lambda e, rule=rule: PopularityGate(rule=rule))
        for rule in ("min", "entity", "mean", "rare_count", "total")
    },
    "stacked target=gain (default)": ("stacked", lambda e: StackedGate(e)),
    "stacked target=helps": ("stacked", lambda e: StackedGate(e, target="helps")),
    "stacked gain, members only": ("stacked", lambda e: StackedGate(e, features=False)),
    "stacked gain, question features only": ("stacked", lambda e: StackedGate(e, members="")),
    "stacked gain, C=1": ("stacked", lambda e: StackedGate(e, C=1.0)),
    "stacked gain, question features only, C=0.01": ("stacked", lambda e: StackedGate(e, members="", C=0.01)),
    "stacked gain, members skr-cls+thrust": ("stacked", lambda e: StackedGate(e, members="skr-cls,thrust")),
    "stacked gain, question features only, pooled": ("pooled", lambda e: StackedGate(e, members="")),
    "stacked gain, members skr-cls+thrust, pooled": ("pooled", lambda e: StackedGate(e, members="skr-cls,thrust")),
}
#: The single gates the stacked gate must beat (its default members; popularity by its default rule).
SINGLE = ("skr-knn (k=10, similarity)", "skr-cls (balanced)", "thrust (MiniLM)", "bm25-difficulty", "popularity rule=min")


def share_member_fits() -> None:
    """Memoise the stacked gate's member fits by (member, rows): the stacked variants
    fitted on the same fold then reuse them instead of refitting identical members."""

    def key(name: str, records: list[OutcomeRecord], *rest: Any) -> tuple[Any, ...]:
        return (name, tuple(r.id for r in records), *(r for r in rest if not hasattr(r, "embed")))

    for attribute in ("member_scores", "fit_member"):
        original = getattr(stacked, attribute)
        memo: dict[tuple[Any, ...], Any] = {}

        @functools.wraps(original)
        def shared(name: str, records: Any, *rest: Any, _original=original, _memo=memo) -> Any:
            k = key(name, list(records), *rest)
            if k not in _memo:
                _memo[k] = _original(name, records, *rest)
            return _memo[k]

        setattr(stacked, attribute, shared)


def pooled_scores(
    make: Callable[[], Gate], records: list[OutcomeRecord], others: list[OutcomeRecord], metric: str, seed: int
) -> np.ndarray:
    """Out-of-fold scores of a gate fitted on the other folds *and* all rows of the
    other five data sets (the same folds as ``cross_fitted_scores``)."""
    scores = np.empty(len(records))
    for kept, held_out in fold_splits(len(records), FOLDS, seed):
        gate = make().fit_outcomes([records[i] for i in kept] + others, metric)
        scores[held_out] = gate.score([records[i].question for i in held_out])
    return scores


def evaluate_split(
    records: list[OutcomeRecord], others: list[OutcomeRecord], embedder: Embedder, metric: str, seed: int
) -> dict[str, Any]:
    a, b = outcome_scores(records, metric)
    out: dict[str, Any] = {"n": len(records), "gates": {}}
    for name, (kind, make) in tqdm(VARIANTS.items(), desc="variants", leave=False):
        if kind == "pooled":
            scores = pooled_scores(lambda: make(embedder), records, others, metric, seed)
        else:
            scores = cross_fitted_scores(lambda: make(embedder), records, metric, folds=FOLDS, seed=seed)
        report = evaluate_scores(scores, a, b, gate=name, metric=metric)
        out["gates"][name] = {"kind": kind, **{k: report[k] for k in ("gap_capture", "decision_auroc", "auc")}}
        for key in ("never", "always", "oracle", "auc_random", "auc_oracle"):
            out[key] = report[key]
    return out


def render(results: dict[str, Any]) -> str:
    columns = [*ADARAGUE_SPLITS, "mean"]
    rows = {**results["datasets"], "mean": results["mean"]}
    names = list(VARIANTS)

    def table(key: str, extra: list[list[Any]]) -> str:
        body = [[n, *(rows[c]["gates"][n][key] for c in columns)] for n in names]
        return markdown_table(["gate", *columns], body + extra)

    band = ["random scores: 95% band", *("{:+.3f} .. {:+.3f}".format(*rows[c]["null_gap_capture_95"]) for c in columns)]
    best_single = ["best single gate", *(max(rows[c]["gates"][n]["gap_capture"] for n in SINGLE) for c in columns)]
    return "\n\n".join([
        f"# Popularity and stacked gates, {FOLDS}-fold cross-validation (metric: {results['metric']}, "
        f"encoder: {results['encoder']}, seed {results['seed']})",
        "Out-of-fold scores of all 500 questions per data set, pooled; the folds of `skr_crossval.py`. "
        "'mean' is the unweighted mean over the six data sets. A stacked gate cross-fits its members "
        "inside the four training folds.",
        "## Oracle-gap capture (0 = random, 1 = oracle)\n\n" + table("gap_capture", [best_single, band]),
        "## Decision AUROC (need score vs. 'retrieval helps', b > a)\n\n" + table("decision_auroc", []),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--metric", default="contains", choices=("contains", "em", "f1"))
    parser.add_argument("--seed", type=int, default=0, help="fold split and null-band seed (default: 0)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    share_member_fits()

    embedder = CachedEmbedder(default_embedder())
    results: dict[str, Any] = {"metric": args.metric, "folds": FOLDS, "seed": args.seed,
                               "encoder": embedder.model_id, "datasets": {}}
    rng = np.random.default_rng(args.seed)
    nulls = {}
    data = {split: load_outcomes(adarague_path(args.data, split)) for split in ADARAGUE_SPLITS}
    embedder.embed([r.question for records in data.values() for r in records])
    for split, records in tqdm(data.items(), desc="data sets"):
        others = [r for other, rows in data.items() if other != split for r in rows]
        results["datasets"][split] = evaluate_split(records, others, embedder, args.metric, args.seed)
        nulls[split] = null_gap_captures(*outcome_scores(records, args.metric), rng)
    splits = list(results["datasets"].values())
    results["mean"] = {"gates": {
        n: {"kind": VARIANTS[n][0], **{k: float(np.mean([s["gates"][n][k] for s in splits]))
                                      for k in ("gap_capture", "decision_auroc", "auc")}}
        for n in VARIANTS
    }}
    nulls["mean"] = np.mean(list(nulls.values()), axis=0)
    for name, draws in nulls.items():
        target = results["mean"] if name == "mean" else results["datasets"][name]
        target["null_gap_capture_95"] = [float(q) for q in np.percentile(draws, [2.5, 97.5])]
    markdown = render(results)
    print(markdown)
    for path in write_results("gate_stack_crossval", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
