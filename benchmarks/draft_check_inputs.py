"""What two more inputs add to the draft-check gate: a domain (task) indicator and the
draft's own sentence embedding, cross-fitted on the bundled Llama-3.1-8B outcomes with
fold seeds not used before (10 to 19).

Data and retrieval as ``draft_check.py`` (whose table, caches and scoring this script
reuses): ``adaptive_gates.bundled.datasets.adarague_outcomes()``, six tasks of 500 questions,
the draft = the answer without retrieval, metric "contains", one BM25 search (k=3)
per question over the shared Wikipedia paragraph corpus (``--corpus``; it holds the
HotpotQA and 2WikiMultihopQA questions' own paragraphs, so those two columns are
optimistic). Each question is searched and embedded, and each draft embedded, once,
and cached under ``cache_dir()/benchmarks/draft_check``.

Protocol: pooled 5-fold cross-fitting over all 3,000 questions (one gate learns from
the training folds of every task), per fold seed; each task's gap capture from its
out-of-fold scores, and their unweighted mean. Configurations, each the gate's
default combiner (question features, draft features and the question's MiniLM
embedding reduced to 32 components, logistic and boosted two-headed models
rank-averaged):

- (a) default: as ``DraftCheckGate()``, no task indicator;
- (b) + domain: the one-hot columns ``DraftCheckGate(domain_field="task")`` fits on
  (``gates.domain_columns``: ``domain=<task>`` and ``domain=other``);
- (c) + draft embedding: the draft's MiniLM embedding reduced to 16 components by a PCA
  learned on the training folds only, as 16 more columns (``gates.draft_embedding``,
  what ``DraftCheckGate(draft_embedding=True)`` fits);
- (d) both.

Reported: the mean and standard deviation over the seeds of each task's gap capture
and of the six-task mean, and of each configuration's paired difference from (a) (same
seed, same folds). An input is taken to hold when its mean paired gain is larger than
both the seed-to-seed spread of (a)'s six-task mean and the spread of the paired
gains themselves.

The configurations are assembled here from the cached table, as the gate assembles
its columns; as a check that the gate does what was measured, (a) and (d) are also
cross-fitted through ``DraftCheckGate`` itself (``fit_outcomes`` / ``score_records``,
BM25 and MiniLM memoised) for the first seed, on the same folds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/draft_check_inputs.py [--corpus PATH] [--seeds 10 11 ...]

Writes benchmarks/results/draft_check_inputs.{md,json}.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _common import DEFAULT_DATA, markdown_table, write_results
from adaptive_gates import CachedEmbedder, DraftCheckGate
from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, TASK_FIELD, adarague_outcomes
from adaptive_gates.gates.base.folds import fold_splits
from adaptive_gates.gates.combiner.features import fit_feature_combiner
from adaptive_gates.gates.draft_check.domain_columns import DomainColumns
from adaptive_gates.gates.draft_check.draft_embedding import DraftProjection
from adaptive_gates.models import cache_dir, default_embedder
from adaptive_gates.records.data import OutcomeRecord
from adaptive_gates.retrieval import BM25Retriever, CachedRetriever
from adaptive_gates.signals.draft import DRAFT_FEATURE_NAMES
from draft_check import FOLDS, Table, Variant, build_table, capture, embedded, out_of_fold

SEEDS = tuple(range(10, 20))
#: The draft embedding's principal components in (c) and (d).
DRAFT_DIMS = 16
#: The default gate's columns (``draft_check.Variant``): question and draft features,
#: the question's embedding (PCA 32), rank-averaged logistic and boosted models, gain.
DEFAULT = Variant(DRAFT_FEATURE_NAMES, embedding=True, model="blend")


@dataclass(frozen=True)
class Inputs:
    """Which inputs a configuration adds to the default gate's."""

    domain: bool = False
    draft_embedding: bool = False


CONFIGURATIONS = {
    "(a) default": Inputs(),
    "(b) + domain": Inputs(domain=True),
    "(c) + draft embedding PCA16": Inputs(draft_embedding=True),
    "(d) + both": Inputs(domain=True, draft_embedding=True),
}


def fitter(table: Table, domains: np.ndarray, drafts: np.ndarray, inputs: Inputs, seed: int):
    """Fits the configuration on the rows ``kept`` and scores the rows ``held_out``
    (``seed``: the PCAs' randomised solver's and the trees')."""

    def fit_and_score(kept: np.ndarray, held_out: np.ndarray) -> np.ndarray:
        train, names = table.columns(DEFAULT, kept, indicator=False)
        test, _ = table.columns(DEFAULT, held_out, indicator=False)
        names = list(names)
        if inputs.domain:
            columns = DomainColumns.fitted(domains[kept])
            train = np.hstack([train, columns.rows(list(domains[kept]))])
            test = np.hstack([test, columns.rows(list(domains[held_out]))])
            names += columns.names
        if inputs.draft_embedding:
            projection = DraftProjection.fit(drafts[kept], DRAFT_DIMS, seed=seed)
            train = np.hstack([train, projection.columns(drafts[kept])])
            test = np.hstack([test, projection.columns(drafts[held_out])])
            names += projection.names
        combiner = fit_feature_combiner(
            train,
            names,
            table.a[kept],
            table.b[kept],
            embeddings=table.embedding[kept],
            model=DEFAULT.model,
            target=DEFAULT.target,
            seed=seed,
        )
        return combiner.score(test, table.embedding[held_out])

    return fit_and_score


def run(table: Table, domains: np.ndarray, drafts: np.ndarray, seeds: tuple[int, ...]) -> dict[str, list[list[float]]]:
    """Per configuration, per seed: each task's pooled out-of-fold gap capture."""
    rows = np.arange(len(table.a))
    figures: dict[str, list[list[float]]] = {name: [] for name in CONFIGURATIONS}
    for seed in seeds:
        for name, inputs in CONFIGURATIONS.items():
            started = time.perf_counter()
            scores = out_of_fold(fitter(table, domains, drafts, inputs, seed), rows, seed)
            per_task = [capture(table, scores, rows, t) for t in range(len(ADARAGUE_TASKS))]
            figures[name].append(per_task)
            print(
                f"seed {seed} | {name:<30} | mean {np.mean(per_task):+.4f} | {time.perf_counter() - started:.0f} s",
                flush=True,
            )
    return figures


def through_the_gate(
    records: list[OutcomeRecord], table: Table, domains: np.ndarray, corpus: Path, drafts: np.ndarray, seed: int
) -> dict[str, dict[str, list[float]]]:
    """(a) and (d) cross-fitted through ``DraftCheckGate`` itself on the folds of ``seed``,
    and from the table on the same folds with the gate's own fitting seed (0): each
    task's gap capture, which should agree."""
    encoder = CachedEmbedder(default_embedder())
    encoder.store([r.question for r in records], table.embedding)
    encoder.store([r.pred_no_retrieval for r in records], drafts)
    retriever = CachedRetriever(BM25Retriever.from_jsonl(corpus))
    options = {"(a) default": {}, "(d) + both": {"domain_field": TASK_FIELD, "draft_embedding": True}}
    rows = np.arange(len(records))
    out = {}
    for name, params in options.items():
        scores = np.empty(len(records))
        for kept, held_out in fold_splits(len(records), FOLDS, seed):
            gate = DraftCheckGate(retriever=retriever, embedder=encoder, **params)
            gate.fit_outcomes([records[i] for i in kept])
            scores[held_out] = gate.score_records([records[i] for i in held_out])
        table_scores = out_of_fold(fitter(table, domains, drafts, CONFIGURATIONS[name], 0), rows, seed)
        out[name] = {
            "gate": [capture(table, scores, rows, t) for t in range(len(ADARAGUE_TASKS))],
            "table": [capture(table, table_scores, rows, t) for t in range(len(ADARAGUE_TASKS))],
        }
        print(f"through the gate, seed {seed} | {name:<30} | mean {np.mean(out[name]['gate']):+.4f}", flush=True)
    return out


def summarise(figures: dict[str, list[list[float]]]) -> dict[str, Any]:
    """Means and spreads over seeds, per task and of the six-task mean; paired gains over (a)."""
    base = np.asarray(figures["(a) default"])
    out: dict[str, Any] = {}
    for name, per_seed in figures.items():
        f = np.asarray(per_seed)  # seeds x tasks
        gain = f - base
        out[name] = {
            "per_task_mean": f.mean(axis=0).tolist(),
            "per_task_sd": f.std(axis=0, ddof=1).tolist(),
            "mean": float(f.mean(axis=1).mean()),
            "mean_sd": float(f.mean(axis=1).std(ddof=1)),
            "gain_per_task": gain.mean(axis=0).tolist(),
            "gain": float(gain.mean(axis=1).mean()),
            "gain_sd": float(gain.mean(axis=1).std(ddof=1)),
            "seeds_gaining": int(np.sum(gain.mean(axis=1) > 0)),
        }
    spread = out["(a) default"]["mean_sd"]
    for name, row in out.items():
        row["holds"] = name != "(a) default" and row["gain"] > max(spread, row["gain_sd"])
    return out


def render(results: dict[str, Any]) -> str:
    summary = results["summary"]
    header = ["configuration", *ADARAGUE_TASKS, "mean"]
    body = [
        [
            name,
            *(f"{m:.3f} ± {s:.3f}" for m, s in zip(row["per_task_mean"], row["per_task_sd"])),
            f"{row['mean']:.3f} ± {row['mean_sd']:.3f}",
        ]
        for name, row in summary.items()
    ]
    gains = [
        [
            name,
            *(f"{g:+.3f}" for g in row["gain_per_task"]),
            f"{row['gain']:+.3f} ± {row['gain_sd']:.3f}",
            f"{row['seeds_gaining']} of {len(results['seeds'])}",
            "yes" if row["holds"] else "no",
        ]
        for name, row in summary.items()
        if name != "(a) default"
    ]
    return "\n\n".join(
        [
            "# Draft-check inputs: a domain indicator and the draft's embedding "
            "(pooled 5-fold cross-fitting, bundled Llama-3.1-8B outcomes, metric contains)",
            f"Command: `{results['command']}`. {results['n']} questions (6 tasks of 500), fold seeds "
            f"{', '.join(map(str, results['seeds']))}; BM25 k={results['k']} over `{results['corpus']}`; "
            "draft = the answer without retrieval. Gap capture (0 = random, 1 = oracle), mean ± standard "
            "deviation over the seeds; 'mean' is the unweighted mean over the six tasks. The corpus holds the "
            "HotpotQA and 2WikiMultihopQA questions' own paragraphs: those two columns are optimistic.",
            "## gap capture\n\n" + markdown_table(header, body),
            "## paired gain over (a), same seeds and folds\n\n"
            + markdown_table(["configuration", *ADARAGUE_TASKS, "mean ± sd", "seeds with a gain", "holds"], gains)
            + "\n\n'holds': the mean gain is larger than both the seed spread of (a)'s mean "
            f"({summary['(a) default']['mean_sd']:.3f}) and the spread of the paired gains.",
            f"## check: through `DraftCheckGate` itself, folds of seed {results['seeds'][0]}\n\n"
            + markdown_table(
                header,
                [
                    row
                    for name, check in results["through_the_gate"].items()
                    for row in (
                        [
                            f"{name}, as above (PCA solver seed {results['seeds'][0]})",
                            *results["figures"][name][0],
                            float(np.mean(results["figures"][name][0])),
                        ],
                        [
                            f"{name}, as above with the gate's PCA seed (0)",
                            *check["table"],
                            float(np.mean(check["table"])),
                        ],
                        [f"{name}, through the gate", *check["gate"], float(np.mean(check["gate"]))],
                    )
                ],
            )
            + "\n\nThe first two rows of each differ only by the seed of the PCAs' randomised solver: that much "
            "of the spread comes from the components' noise alone.",
            f"Ran in {results['seconds']:.0f} s.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_DATA / "wiki_paragraph_corpus.jsonl")
    parser.add_argument("--k", type=int, default=3, help="passages retrieved per question (default: 3)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="fold seeds (default: 10 .. 14)")
    args = parser.parse_args()
    if not args.corpus.is_file():
        raise SystemExit(f"missing {args.corpus}: pass --corpus with the Wikipedia paragraph corpus")
    started = time.perf_counter()
    records = adarague_outcomes()
    table = build_table(records, args.corpus, args.k, "contains")
    domains = np.array([r.extra[TASK_FIELD] for r in records])
    drafts = np.asarray(
        embedded([r.pred_no_retrieval for r in records], cache_dir() / "benchmarks" / "draft_check"), dtype=np.float64
    )
    figures = run(table, domains, drafts, tuple(args.seeds))
    gate = through_the_gate(records, table, domains, args.corpus, drafts, args.seeds[0])
    results: dict[str, Any] = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/draft_check_inputs.py"
        + ("" if args.k == 3 else f" --k {args.k}")
        + ("" if tuple(args.seeds) == SEEDS else " --seeds " + " ".join(map(str, args.seeds))),
        "n": len(records),
        "k": args.k,
        "corpus": args.corpus.name,
        "folds": FOLDS,
        "seeds": list(args.seeds),
        "tasks": list(ADARAGUE_TASKS),
        "draft_embedding_dims": DRAFT_DIMS,
        "figures": figures,
        "summary": summarise(figures),
        "through_the_gate": gate,
    }
    results["seconds"] = time.perf_counter() - started
    markdown = render(results)
    print(markdown)
    for path in write_results("draft_check_inputs", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
