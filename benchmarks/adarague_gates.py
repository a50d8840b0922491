"""Every offline gate on the bundled Llama-3.1-8B-Instruct outcomes, cross-fitted, in
the units the field compares (SPEC §6): gap capture, accuracy at the calibrated
threshold (``in_accuracy``), retrieval and LM calls per question, the retrieval calls
needed to match always-retrieve, and the band of random gates.

Data: ``adaptive_gates.datasets.adarague_outcomes()`` (packaged; no data folder
needed), six AdaRAGUE tasks of 500 questions answered without and with one BM25
retrieval, metric "contains".

Protocol: 5-fold cross-fitting, seed 0 (``adaptive_gates.evaluation.cross_fitted_reports``).
Each fold's gate is fitted on the other four folds and scores the held-out one; its
threshold is calibrated for the best accuracy on the other four folds' out-of-fold
scores and outcomes, then it decides the held-out questions. The fit never sees a
held-out outcome; the threshold's look at it is indirect (other questions' scores from
gates fitted with it), which a nested cross-fit would avoid at six times the cost
(well over an hour for the stacked gate). Two settings:

- per task: the folds cut each task's 500 questions, the gate learns from that task only;
- pooled: the folds cut all 3,000 questions, the gate learns from the training folds of
  every task at once (no task indicator) and is judged per task on its held-out questions.

Each setting is reported per task and over all 3,000 questions (in the per-task setting
the "all" curve orders questions by scores of six different gates, so only its
decisions' figures are like-for-like with the pooled row). The gate configurations are
those of ``gate_stack_crossval.py`` (its ``VARIANTS``; member fits shared the same way),
with MiniLM as the sentence encoder; no gate here reads an LLM, so an answer costs one
LM call per question.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/adarague_gates.py [--gates NAME ...] [--folds 5]

Writes benchmarks/results/adarague_gates.{md,json} and adarague_gates.png (the pooled
gates' curves over all 3,000 questions).
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from tqdm import tqdm

from _common import RESULTS, markdown_table, write_results
from adaptive_gates import CachedEmbedder
from adaptive_gates.datasets import ADARAGUE_TASKS, adarague_outcomes
from adaptive_gates.evaluation import ALL, cross_fitted_reports, plot_reports
from adaptive_gates.models.defaults import default_embedder
from gate_stack_crossval import VARIANTS, Encoders, share_member_fits

METRIC = "contains"

#: Short name -> configuration in ``gate_stack_crossval.VARIANTS``.
GATES = {
    "skr-knn": "skr-knn (k=10, similarity)",
    "skr-cls": "skr-cls (balanced)",
    "thrust": "thrust (MiniLM)",
    "bm25-difficulty": "bm25-difficulty",
    "popularity": "popularity rule=min",
    "stacked": "stacked target=gain (default)",
    "stacked (features only)": "stacked gain, question features only, C=0.01",
}

#: The per-gate figures the tables show.
FIGURES = ("gap_capture", "in_accuracy", "retrieval_calls", "lm_calls", "calls_to_match_always")


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the JSON keeps of a report: the figures, the band and the baselines."""
    keep = ("n", "never", "always", "oracle", "auc", "decision_auroc", "at_threshold", "random_band", *FIGURES)
    return {k: report[k] for k in keep}


def render(results: dict[str, Any]) -> str:
    columns = [*results["tasks"], "all"]
    sections = [
        f"# Offline gates on the bundled Llama-3.1-8B-Instruct outcomes ({results['folds']}-fold cross-fitted, "
        f"metric: {METRIC}, seed {results['seed']})",
        "Each fold's gate is fitted on the other folds, calibrated for the best accuracy on their "
        "out-of-fold scores, and scores and decides the held-out fold. *Per task*: fitted on one task's "
        "questions; *pooled*: fitted on the training folds of all six tasks. 'all' = the 3,000 questions "
        "together. Band = where 95% of 1,000 random gates land on the same outcomes (gap capture; "
        "accuracy at the gate's own retrieval rate). Calls are per question; an LM call is one answer "
        "(no gate here asks the LLM).",
        "## Baselines\n\n"
        + markdown_table(
            ["", *columns],
            [[key, *(results["baselines"][c][key] for c in columns)] for key in ("never", "always", "oracle")],
        ),
    ]
    for setting in ("per task", "pooled"):
        rows = results["settings"][setting]
        for figure, title in (
            ("gap_capture", "oracle-gap capture (0 = random, 1 = oracle)"),
            ("in_accuracy", "accuracy at the calibrated threshold (in_accuracy)"),
            ("retrieval_calls", "retrieval calls per question at the threshold"),
            ("calls_to_match_always", "retrieval calls per question to match always-retrieve's accuracy"),
        ):
            body = [[gate, *(rows[gate][c][figure] for c in columns)] for gate in rows]
            if figure == "gap_capture":
                body.append(
                    [
                        "random gates, 95%",
                        *(_span(rows[next(iter(rows))][c]["random_band"]["gap_capture"]) for c in columns),
                    ]
                )
            if figure == "in_accuracy":
                body += [
                    [
                        f"{gate}: random gates at its rate",
                        *(_span(rows[gate][c]["random_band"]["accuracy"]) for c in columns),
                    ]
                    for gate in rows
                ]
            sections.append(f"## {setting}: {title}\n\n" + markdown_table(["gate", *columns], body))
    sections.append(
        "Seconds per gate (both settings): " + ", ".join(f"{gate} {s:.0f}" for gate, s in results["seconds"].items())
    )
    return "\n\n".join(sections)


def _span(pair: list[float] | None) -> str:
    return "n/a" if pair is None else f"{pair[0]:.3f} .. {pair[1]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gates", nargs="+", choices=list(GATES), default=list(GATES))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="fold split seed (default: 0)")
    parser.add_argument("--per-task-limit", type=int, help="only the first N questions of each task (a quick run)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    share_member_fits()

    tasks = {t: adarague_outcomes(t)[: args.per_task_limit] for t in ADARAGUE_TASKS}
    sentence = CachedEmbedder(default_embedder())
    sentence.embed([r.question for rows in tasks.values() for r in rows])
    # No gate here reads the LM's hidden state: the sentence encoder fills both slots.
    encoders = Encoders(sentence, sentence)
    results: dict[str, Any] = {
        "metric": METRIC,
        "folds": args.folds,
        "seed": args.seed,
        "tasks": list(tasks),
        "encoder": sentence.model_id,
        "calibration": "objective (best accuracy)",
        "configurations": {g: GATES[g] for g in args.gates},
        "settings": {"per task": {}, "pooled": {}},
        "seconds": {},
    }
    full: dict[str, dict[str, Any]] = {}
    for gate in tqdm(args.gates, desc="gates"):
        make = lambda v=VARIANTS[GATES[gate]][1]: v(encoders)  # noqa: E731
        start = time.perf_counter()
        for setting, pooled in (("per task", False), ("pooled", True)):
            reports = cross_fitted_reports(
                make, tasks, pooled=pooled, name=gate, metric=METRIC, folds=args.folds, seed=args.seed
            )
            results["settings"][setting][gate] = {c: summary(r) for c, r in reports.items()}
            if pooled:
                full[gate] = reports[ALL]
        results["seconds"][gate] = time.perf_counter() - start
        print(f"{gate}: {results['seconds'][gate]:.0f} s", flush=True)
    first = results["settings"]["pooled"][args.gates[0]]
    results["baselines"] = {c: {k: first[c][k] for k in ("n", "never", "always", "oracle")} for c in first}
    markdown = render(results)
    print(markdown)
    for path in write_results("adarague_gates", markdown, results):
        print(f"wrote {path}")
    plot = plot_reports(
        list(full.values()),
        RESULTS / "adarague_gates.png",
        title="pooled gates, 3,000 AdaRAGUE questions (Llama-3.1-8B, cross-fitted)",
    )
    print(f"wrote {plot}")


if __name__ == "__main__":
    main()
