"""5-fold cross-validation of Thrust and IAPEK-BM25 on the six AdaRAGUE train splits.

For each split (500 outcome records) every variant is fitted on four folds and scores
the fifth (``cross_fitted_scores``, seeded, the same folds for every variant); the
pooled out-of-fold scores give the SPEC §6 figures: oracle-gap capture, decision
AUROC and the accuracy at 25/50/75% retrieval read off the cross-validated curve.
Thrust needs no answers: the outcomes are used for evaluation only.

Representations: SmolLM2-135M-Instruct hidden states of every layer (0 = token
embeddings ... 30 = last), computed once per question and pooling and served from
memory, so the layer sweep costs only k-means; MiniLM sentence embeddings (the
black-box path). Table variants: layers 30, 15 and 4, last-token and mean pooling,
the chat-templated input, the authors' floor rule for K, MiniLM, and BM25 familiarity
(top-10 mean and mean over all). Each fold gate also decides its held-out questions at
the three knowledge-need levels (thresholds from its own fitting scores), giving the
realised retrieval rates, with cross-fitted (default) and in-sample (paper) fitting
scores. The sweep over all layers uses in-sample fitting scores: the ranking, and so
every figure but the levels, does not depend on them.

    .venv/bin/python benchmarks/thrust_crossval.py [--data DIR] [--metric contains] [--limit N]

Writes benchmarks/results/thrust_crossval.{md,json} and thrust_layers.png.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

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
from adaptive_gates import (
    BM25DifficultyGate,
    CachedEmbedder,
    LMHiddenStateRepresenter,
    ThrustGate,
    load_outcomes,
    outcome_scores,
)
from adaptive_gates.evaluation import (
    cross_fitted_scores,
    decision_auroc,
    gap_capture,
    gate_curve,
    null_gap_captures,
    oracle_curve,
    random_auc,
)
from adaptive_gates.gates.base.calibration import threshold_for_rate
from adaptive_gates.gates.base.percentile import LEVELS, FitPercentileGate
from adaptive_gates.models.defaults import default_embedder, default_llm
from adaptive_gates.models.lm.local import LocalCausalLM
from adaptive_gates.records.data import OutcomeRecord

FOLDS = 5
RATES = (0.25, 0.5, 0.75)
TABLE_LAYERS = (30, 15, 4)
MAX_LENGTH = 256
#: (pooling, chat template) of the SmolLM2 hidden states computed for every layer.
FORMS = (("last_token", False), ("mean", False), ("last_token", True))


def form_name(pooling: str, chat: bool) -> str:
    return f"{pooling}{', chat' if chat else ''}"


@dataclass(frozen=True)
class Variant:
    """A gate configuration; ``levels``: also record decisions at the three levels."""

    name: str
    make: Callable[[], FitPercentileGate]
    levels: bool = True


class SplitRepresentations:
    """One split's questions represented once: SmolLM2 states of all layers per form, MiniLM."""

    def __init__(self, lm: LocalCausalLM, minilm: CachedEmbedder, questions: list[str]) -> None:
        self.lm, self.minilm, self.questions = lm, minilm, questions
        layers = list(range(lm.num_layers + 1))
        self.states = {
            form: lm.hidden_states(
                questions, layers=layers, pooling=form[0], max_length=MAX_LENGTH, formatted=not form[1]
            )
            for form in tqdm(FORMS, desc="SmolLM2 passes", leave=False)
        }
        minilm.embed(questions)

    def layer(self, layer: int, pooling: str = "last_token", chat: bool = False) -> CachedEmbedder:
        """A representer serving one layer from memory (its id names the layer and form)."""
        rep = CachedEmbedder(
            LMHiddenStateRepresenter(self.lm, layer=layer, pooling=pooling, max_length=MAX_LENGTH, chat_template=chat)
        )
        rep.store(self.questions, self.states[(pooling, chat)][:, layer])
        return rep


def table_variants(reps: SplitRepresentations) -> list[Variant]:
    out = [
        Variant(f"thrust L{layer} {form_name(pooling, False)}", partial(ThrustGate, reps.layer(layer, pooling)))
        for pooling in ("last_token", "mean")
        for layer in TABLE_LAYERS
    ]
    last = reps.layer(30)
    out += [
        Variant("thrust L30 last_token, in-sample levels (paper)", lambda: ThrustGate(last, level_scores="in_sample")),
        Variant("thrust L30 last_token, floor K (code)", lambda: ThrustGate(last, n_clusters_rule="floor")),
        Variant("thrust L30 last_token, chat", partial(ThrustGate, reps.layer(30, chat=True))),
        Variant("thrust MiniLM", lambda: ThrustGate(reps.minilm)),
        Variant("bm25-difficulty top-10", lambda: BM25DifficultyGate(top_k=10)),
        Variant("bm25-difficulty all", lambda: BM25DifficultyGate(top_k=None)),
    ]
    return out


def sweep_variants(reps: SplitRepresentations) -> dict[str, list[Variant]]:
    return {
        form_name(pooling, chat): [
            Variant(
                f"thrust L{layer} {form_name(pooling, chat)}",
                partial(ThrustGate, reps.layer(layer, pooling, chat), level_scores="in_sample"),
                levels=False,
            )
            for layer in range(reps.lm.num_layers + 1)
        ]
        for pooling, chat in FORMS
    }


def out_of_fold(
    variant: Variant, records: Sequence[OutcomeRecord], metric: str, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold need scores, and each question's fold-gate thresholds at the three levels."""
    index = {r.question: i for i, r in enumerate(records)}
    thresholds = np.full((len(records), len(LEVELS)), np.nan)

    def factory() -> FitPercentileGate:
        gate = variant.make()
        if variant.levels:
            score = gate.score

            def score_and_record(batch: Sequence[str]) -> np.ndarray:
                cuts = [threshold_for_rate(gate.fit_scores_, rate).threshold for rate in LEVELS.values()]
                thresholds[[index[q] for q in batch]] = cuts
                return score(batch)

            gate.score = score_and_record  # type: ignore[method-assign]
        return gate

    return cross_fitted_scores(factory, records, metric, folds=FOLDS, seed=seed), thresholds


def evaluate(
    variant: Variant, records: Sequence[OutcomeRecord], a: np.ndarray, b: np.ndarray, metric: str, seed: int
) -> dict[str, Any]:
    """Gap capture, AUROC, AUC, accuracy at the RATES and (if asked) the realised levels."""
    start = time.perf_counter()
    scores, thresholds = out_of_fold(variant, records, metric, seed)
    curve = gate_curve(scores, a, b)
    result: dict[str, Any] = {
        "gap_capture": gap_capture(curve.auc, random_auc(a, b), oracle_curve(a, b).auc),
        "decision_auroc": decision_auroc(scores, a, b),
        "auc": curve.auc,
        "accuracy_at": {str(rate): curve.accuracy_at(rate) for rate in RATES},
        "seconds": time.perf_counter() - start,
    }
    if variant.levels:
        retrieve = scores[:, None] > thresholds
        result["levels"] = {
            level: {"retrieval_rate": float(r.mean()), "accuracy": float(np.where(r, b, a).mean())}
            for level, r in zip(LEVELS, retrieve.T)
        }
    return result


def baselines(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
    null = null_gap_captures(a, b, rng)
    return {
        "n": int(a.size),
        "never": float(a.mean()),
        "always": float(b.mean()),
        "oracle": float(np.maximum(a, b).mean()),
        "helps": float((b > a).mean()),
        "random_accuracy_at": {str(r): float(a.mean() + r * (b.mean() - a.mean())) for r in RATES},
        "null_draws": null,
    }


def mean_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def average(per_split: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Unweighted mean over data sets of every number in the (nested) results."""

    def merge(items: list[Any]) -> Any:
        if isinstance(items[0], dict):
            return {k: merge([item[k] for item in items]) for k in items[0]}
        if isinstance(items[0], list):  # per-layer lists
            return [merge([item[i] for item in items]) for i in range(len(items[0]))]
        return mean_of(items)

    return merge(list(per_split.values()))


def render(results: dict[str, Any]) -> str:
    splits = results["datasets"]
    columns = [*splits, "mean"]
    rows = {**splits, "mean": results["mean"]}
    names = list(results["mean"]["table"])

    def per_variant(key: str, extra: Sequence[Sequence[Any]] = ()) -> str:
        body = [[n, *(rows[c]["table"][n][key] for c in columns)] for n in names]
        return markdown_table(["variant", *columns], [*body, *extra])

    null_row = [
        "random scores: 95% band",
        *("{:+.3f} .. {:+.3f}".format(*rows[c]["null_gap_capture_95"]) for c in columns),
    ]
    base = markdown_table(
        ["data set", "n", "never", "always", "oracle", "retrieval helps"],
        [[c, s["n"], s["never"], s["always"], s["oracle"], s["helps"]] for c, s in splits.items()],
    )
    mean = results["mean"]
    at_rates = markdown_table(
        ["variant", *(f"acc @ {int(r * 100)}%" for r in RATES), *(f"vs random @ {int(r * 100)}%" for r in RATES)],
        [
            ["random", *(mean["random_accuracy_at"][str(r)] for r in RATES), *("" for _ in RATES)],
            *(
                [
                    n,
                    *(mean["table"][n]["accuracy_at"][str(r)] for r in RATES),
                    *(
                        f"{mean['table'][n]['accuracy_at'][str(r)] - mean['random_accuracy_at'][str(r)]:+.3f}"
                        for r in RATES
                    ),
                ]
                for n in names
            ),
        ],
    )
    levels = markdown_table(
        ["variant", *(f"{level} ({int(rate * 100)}%)" for level, rate in LEVELS.items())],
        [
            [
                n,
                *(
                    f"{mean['table'][n]['levels'][level]['retrieval_rate']:.3f} / "
                    f"{mean['table'][n]['levels'][level]['accuracy']:.3f}"
                    for level in LEVELS
                ),
            ]
            for n in names
        ],
    )
    sweep = markdown_table(
        ["layer", *(f"G {form}" for form in mean["sweep"]), *(f"AUROC {form}" for form in mean["sweep"])],
        [
            [
                layer,
                *(mean["sweep"][form][layer]["gap_capture"] for form in mean["sweep"]),
                *(mean["sweep"][form][layer]["decision_auroc"] for form in mean["sweep"]),
            ]
            for layer in range(len(next(iter(mean["sweep"].values()))))
        ],
    )
    return "\n\n".join(
        [
            f"# Thrust and IAPEK-BM25, {FOLDS}-fold cross-validation (metric: {results['metric']})",
            f"Out-of-fold scores of all questions per data set, pooled; folds seeded ({results['seed']}) and shared "
            "by every variant. 'mean' is the unweighted mean over the six data sets. SmolLM2 = the embedded "
            "SmolLM2-135M-Instruct; layer 0 is the token embeddings, 30 the last layer; input is the raw "
            "question unless 'chat'. Thrust fits on the questions alone (no answers).",
            "## Outcomes and baselines\n\n" + base,
            "## Oracle-gap capture (0 = random, 1 = oracle)\n\n" + per_variant("gap_capture", [null_row]),
            "## Decision AUROC (need score vs. 'retrieval helps', b > a)\n\n" + per_variant("decision_auroc"),
            "## Accuracy at fixed retrieval rates (mean over data sets, from the cross-validated curve)\n\n" + at_rates,
            "## Knowledge-need levels: realised retrieval rate / accuracy (mean over data sets)\n\n"
            f"Each fold gate (fitted on {round(mean['n'] * (FOLDS - 1) / FOLDS)} questions) thresholds its held-out "
            "questions at the percentile of its own fitting scores for 25/50/75% retrieval.\n\n" + levels,
            "## Layer sweep (mean over data sets; in-sample fitting scores, which do not change the ranking)\n\n"
            + sweep,
        ]
    )


def plot(results: dict[str, Any], path) -> None:
    """Accuracy at 25/50/75% retrieval against the layer, per data set and the mean
    (the paper's Figure 6 for our data), plus the mean gap capture per layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {**results["datasets"], "mean": results["mean"]}
    fig, axes = plt.subplots(2, 4, figsize=(19, 8.5))
    colours = dict(zip(RATES, ("tab:blue", "tab:orange", "tab:green")))
    styles = {form_name(p, c): s for (p, c), s in zip(FORMS, ("-", "--", ":"))}
    for ax, (name, split) in zip(axes.flat, panels.items()):
        for form, sweep in split["sweep"].items():
            layers = range(len(sweep))
            for rate in RATES:
                ax.plot(
                    layers,
                    [entry["accuracy_at"][str(rate)] for entry in sweep],
                    styles[form],
                    color=colours[rate],
                    linewidth=1.3,
                    label=f"{int(rate * 100)}% retrieve, {form}",
                )
        for rate in RATES:
            ax.axhline(split["random_accuracy_at"][str(rate)], color=colours[rate], alpha=0.35, linewidth=4)
        ax.set_title(name)
        ax.set_xlabel("SmolLM2 layer (0 = embeddings)")
        ax.set_ylabel(f"accuracy ({results['metric']})")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=6.5, loc="best", title="thick pale lines: random gate", title_fontsize=6.5)
    ax = axes.flat[-1]
    low, high = results["mean"]["null_gap_capture_95"]
    ax.axhspan(low, high, color="grey", alpha=0.2, label="random scores, 95%")
    for form, sweep in results["mean"]["sweep"].items():
        ax.plot(range(len(sweep)), [e["gap_capture"] for e in sweep], styles[form], color="black", label=form)
    ax.set_title("mean oracle-gap capture")
    ax.set_xlabel("SmolLM2 layer (0 = embeddings)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(
        f"Thrust on SmolLM2 hidden states: accuracy at 25/50/75% retrieval by layer ({FOLDS}-fold out-of-fold)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument(
        "--metric", default="contains", choices=("contains", "em", "f1"), help="answer metric (default: contains)"
    )
    parser.add_argument("--seed", type=int, default=0, help="fold split and null-band seed (default: 0)")
    parser.add_argument("--limit", type=int, help="only the first N records per split (a smoke run)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    lm, minilm = default_llm(), CachedEmbedder(default_embedder())
    results: dict[str, Any] = {
        "metric": args.metric,
        "folds": FOLDS,
        "seed": args.seed,
        "representers": {"lm": lm.model_id, "embedder": minilm.model_id},
        "datasets": {},
    }
    rng = np.random.default_rng(args.seed)
    nulls = {}
    for split in tqdm(ADARAGUE_SPLITS, desc="data sets"):
        records = load_outcomes(adarague_path(args.data, split))[: args.limit]
        questions = [r.question for r in records]
        if len(set(questions)) != len(questions):
            raise SystemExit(f"{split}: questions must be unique (decisions are matched back by text)")
        a, b = outcome_scores(records, args.metric)
        start = time.perf_counter()
        reps = SplitRepresentations(lm, minilm, questions)
        result = baselines(a, b, rng)
        nulls[split] = result.pop("null_draws")
        result["null_gap_capture_95"] = [float(q) for q in np.percentile(nulls[split], [2.5, 97.5])]
        result["representation_seconds"] = time.perf_counter() - start
        result["table"] = {
            v.name: evaluate(v, records, a, b, args.metric, args.seed)
            for v in tqdm(table_variants(reps), desc="variants", leave=False)
        }
        result["sweep"] = {
            form: [evaluate(v, records, a, b, args.metric, args.seed) for v in variants]
            for form, variants in tqdm(sweep_variants(reps).items(), desc="sweeps", leave=False)
        }
        results["datasets"][split] = result
    results["mean"] = average(results["datasets"])
    results["mean"]["null_gap_capture_95"] = [
        float(q) for q in np.percentile(np.mean(list(nulls.values()), axis=0), [2.5, 97.5])
    ]

    markdown = render(results)
    png = RESULTS / "thrust_layers.png"
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(results, png)
    markdown += f"\n\nPlot: `{png.relative_to(RESULTS.parent)}`."
    print(markdown)
    for path in write_results("thrust_crossval", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
