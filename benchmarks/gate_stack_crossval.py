"""5-fold cross-validation of the popularity gate, the stacked gate and every single
member gate on the six AdaRAGUE train splits, or on the embedded SmolLM2's own outcomes.

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
(the held-out fold is still never seen). Two variants represent questions by the
embedded SmolLM2's last hidden state instead of MiniLM: Thrust alone, and the stacked
gate whose embedding members all use it. Questions are embedded once; a member fitted
on the same rows is shared by the stacked variants (its fit is deterministic), which
changes no figure and saves most of the time.

The AdaRAGUE outcomes are Llama-3.1-8B's answers, which no model installed here can
represent. ``--outcomes boolq-smollm2`` measures the same gates where the answering
model is the one whose hidden states Thrust reads: ``--n`` packaged BoolQ questions
answered by the embedded SmolLM2 without and with the top-3 BM25 passages
(``adaptive_gates.bundled.datasets.boolq_outcomes``, collected once and cached).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gate_stack_crossval.py [--data DIR] [--metric contains]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gate_stack_crossval.py --outcomes boolq-smollm2 [--n 1000]

Writes benchmarks/results/gate_stack_crossval.{md,json} (AdaRAGUE) or
gate_stack_crossval_boolq_smollm2.{md,json}.
"""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from _common import (
    ADARAGUE_SPLITS,
    adarague_path,
    add_data_argument,
    markdown_table,
    smollm2_boolq,
    write_results,
)
from adaptive_gates import (
    BM25DifficultyGate,
    CachedEmbedder,
    LMHiddenStateRepresenter,
    PopularityGate,
    SKRClassifierGate,
    SKRKnnGate,
    StackedGate,
    ThrustGate,
    load_outcomes,
    outcome_scores,
)
from adaptive_gates.evaluation import cross_fitted_scores, evaluate_scores, null_gap_captures
from adaptive_gates.gates import stacked
from adaptive_gates.gates.base.folds import fold_splits
from adaptive_gates.gates.base.gate import Gate
from adaptive_gates.models.defaults import default_embedder
from adaptive_gates.models.protocols import Embedder
from adaptive_gates.records.data import OutcomeRecord

FOLDS = 5


class Encoders(NamedTuple):
    """What the gates represent questions with: the sentence encoder and the LM's hidden state."""

    sentence: Embedder
    lm: Embedder


Factory = Callable[[Encoders], Gate]

#: The combiner the stacked variants below were measured with (the gate's defaults until
#: it took the question's embedding and a blend with boosted trees): logistic heads alone,
#: no embedding; "(default)" in a name means those defaults, kept so the results files
#: stay keyed as they were. The last two variants are the gate's defaults now.
LOGISTIC: dict[str, Any] = {"model": "logistic", "embedding": False}

#: name -> (kind, factory); kind groups the table: member gates, popularity rules, stacked.
VARIANTS: dict[str, tuple[str, Factory]] = {
    "skr-knn (k=10, similarity)": ("member", lambda e: SKRKnnGate(e.sentence, k=10, weighting="similarity")),
    "skr-cls (balanced)": ("member", lambda e: SKRClassifierGate(e.sentence, class_weight="balanced")),
    "thrust (MiniLM)": ("member", lambda e: ThrustGate(e.sentence, level_scores="in_sample")),
    "thrust (SmolLM2 hidden state)": ("member", lambda e: ThrustGate(e.lm, level_scores="in_sample")),
    "bm25-difficulty": ("member", lambda e: BM25DifficultyGate()),
    **{
        f"popularity rule={rule}": ("popularity", lambda e, rule=rule: PopularityGate(rule=rule))
        for rule in ("min", "entity", "mean", "rare_count", "total")
    },
    "stacked target=gain (default)": ("stacked", lambda e: StackedGate(e.sentence, **LOGISTIC)),
    "stacked target=helps": ("stacked", lambda e: StackedGate(e.sentence, target="helps", **LOGISTIC)),
    "stacked gain, members only": ("stacked", lambda e: StackedGate(e.sentence, features=False, **LOGISTIC)),
    "stacked gain, question features only": ("stacked", lambda e: StackedGate(e.sentence, members="", **LOGISTIC)),
    "stacked gain, C=1": ("stacked", lambda e: StackedGate(e.sentence, C=1.0, **LOGISTIC)),
    "stacked gain, question features only, C=0.01": (
        "stacked",
        lambda e: StackedGate(e.sentence, members="", C=0.01, **LOGISTIC),
    ),
    "stacked gain, members skr-cls+thrust": (
        "stacked",
        lambda e: StackedGate(e.sentence, members="skr-cls,thrust", **LOGISTIC),
    ),
    "stacked gain, SmolLM2 hidden state": ("stacked", lambda e: StackedGate(e.lm, **LOGISTIC)),
    "stacked gain, question features only, pooled": (
        "pooled",
        lambda e: StackedGate(e.sentence, members="", **LOGISTIC),
    ),
    "stacked gain, members skr-cls+thrust, pooled": (
        "pooled",
        lambda e: StackedGate(e.sentence, members="skr-cls,thrust", **LOGISTIC),
    ),
    "stacked question only (embedding, blend)": ("stacked", lambda e: StackedGate(e.sentence, members="")),
    "stacked question only (embedding, blend), pooled": ("pooled", lambda e: StackedGate(e.sentence, members="")),
}


def variants(pooled: bool) -> dict[str, tuple[str, Factory]]:
    """The variants to run; the pooled ones need other data sets to pool."""
    return {name: v for name, v in VARIANTS.items() if pooled or v[0] != "pooled"}


#: The single gates the stacked gate must beat (its default members, popularity by its
#: default rule, and Thrust on the LM's hidden state).
SINGLE = (
    "skr-knn (k=10, similarity)",
    "skr-cls (balanced)",
    "thrust (MiniLM)",
    "thrust (SmolLM2 hidden state)",
    "bm25-difficulty",
    "popularity rule=min",
)


def share_member_fits() -> None:
    """Memoise the stacked gate's member fits by (member, rows): the stacked variants
    fitted on the same fold then reuse them instead of refitting identical members."""

    def key(name: str, records: list[OutcomeRecord], *rest: Any) -> tuple[Any, ...]:
        # an encoder enters the key by its model (the variants hold two: MiniLM and SmolLM2)
        return (name, tuple(r.id for r in records), *(getattr(r, "model_id", r) for r in rest))

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
    records: list[OutcomeRecord], others: list[OutcomeRecord], encoders: Encoders, metric: str, seed: int
) -> dict[str, Any]:
    a, b = outcome_scores(records, metric)
    out: dict[str, Any] = {"n": len(records), "gates": {}}
    for name, (kind, make) in tqdm(variants(pooled=bool(others)).items(), desc="variants", leave=False):
        if kind == "pooled":
            scores = pooled_scores(lambda: make(encoders), records, others, metric, seed)
        else:
            scores = cross_fitted_scores(lambda: make(encoders), records, metric, folds=FOLDS, seed=seed)
        report = evaluate_scores(scores, a, b, gate=name, metric=metric)
        out["gates"][name] = {"kind": kind, **{k: report[k] for k in ("gap_capture", "decision_auroc", "auc")}}
        for key in ("never", "always", "oracle", "auc_random", "auc_oracle"):
            out[key] = report[key]
    return out


def render(results: dict[str, Any]) -> str:
    sets = list(results["datasets"])
    columns = [*sets, "mean"] if len(sets) > 1 else sets
    rows = {**results["datasets"], "mean": results.get("mean")}
    names = list(rows[columns[0]]["gates"])

    def table(key: str, extra: list[list[Any]]) -> str:
        body = [[n, *(rows[c]["gates"][n][key] for c in columns)] for n in names]
        return markdown_table(["gate", *columns], body + extra)

    band = ["random scores: 95% band", *("{:+.3f} .. {:+.3f}".format(*rows[c]["null_gap_capture_95"]) for c in columns)]
    best_single = ["best single gate", *(max(rows[c]["gates"][n]["gap_capture"] for n in SINGLE) for c in columns)]
    sizes = sorted({s["n"] for s in results["datasets"].values()})
    return "\n\n".join(
        [
            f"# Popularity and stacked gates, {FOLDS}-fold cross-validation (outcomes: {results['outcomes']}, "
            f"metric: {results['metric']}, encoders: {results['encoders']}, seed {results['seed']})",
            f"Out-of-fold scores of all {'/'.join(map(str, sizes))} questions per data set, pooled; the folds of "
            "`skr_crossval.py`. "
            + ("'mean' is the unweighted mean over the data sets. " if len(sets) > 1 else "")
            + "A stacked gate cross-fits its members inside the four training folds.",
            "## Oracle-gap capture (0 = random, 1 = oracle)\n\n" + table("gap_capture", [best_single, band]),
            "## Decision AUROC (need score vs. 'retrieval helps', b > a)\n\n" + table("decision_auroc", []),
        ]
    )


def outcome_sets(args: argparse.Namespace) -> dict[str, list[OutcomeRecord]]:
    """The data sets of outcome records the gates are judged on."""
    if args.outcomes == "boolq-smollm2":
        return {"boolq (SmolLM2)": smollm2_boolq(args.n, args.seed)}
    return {split: load_outcomes(adarague_path(args.data, split)) for split in ADARAGUE_SPLITS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument(
        "--outcomes",
        default="adarague",
        choices=("adarague", "boolq-smollm2"),
        help="Llama-3.1-8B's on the six AdaRAGUE splits (default), or the embedded SmolLM2's "
        "own on packaged BoolQ questions",
    )
    parser.add_argument("--n", type=int, default=1000, help="BoolQ questions for --outcomes boolq-smollm2")
    parser.add_argument("--metric", default="contains", choices=("contains", "em", "f1"))
    parser.add_argument("--seed", type=int, default=0, help="fold split, sample and null-band seed (default: 0)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    share_member_fits()

    encoders = Encoders(CachedEmbedder(default_embedder()), CachedEmbedder(LMHiddenStateRepresenter()))
    results: dict[str, Any] = {
        "outcomes": args.outcomes,
        "metric": args.metric,
        "folds": FOLDS,
        "seed": args.seed,
        "encoders": f"{encoders.sentence.model_id}, {encoders.lm.model_id}",
        "datasets": {},
    }
    rng = np.random.default_rng(args.seed)
    nulls = {}
    data = outcome_sets(args)
    questions = [r.question for records in data.values() for r in records]
    for encoder in encoders:
        encoder.embed(questions)
    for split, records in tqdm(data.items(), desc="data sets"):
        others = [r for other, rows in data.items() if other != split for r in rows]
        results["datasets"][split] = evaluate_split(records, others, encoders, args.metric, args.seed)
        nulls[split] = null_gap_captures(*outcome_scores(records, args.metric), rng)
    if len(data) > 1:
        splits = list(results["datasets"].values())
        results["mean"] = {
            "gates": {
                n: {
                    "kind": VARIANTS[n][0],
                    **{
                        k: float(np.mean([s["gates"][n][k] for s in splits]))
                        for k in ("gap_capture", "decision_auroc", "auc")
                    },
                }
                for n in VARIANTS
            }
        }
        nulls["mean"] = np.mean(list(nulls.values()), axis=0)
    for name, draws in nulls.items():
        target = results["mean"] if name == "mean" else results["datasets"][name]
        target["null_gap_capture_95"] = [float(q) for q in np.percentile(draws, [2.5, 97.5])]
    markdown = render(results)
    print(markdown)
    name = "gate_stack_crossval" if args.outcomes == "adarague" else "gate_stack_crossval_boolq_smollm2"
    for path in write_results(name, markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
