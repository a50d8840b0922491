"""Every offline gate on the bundled Llama-3.1-8B-Instruct outcomes, cross-fitted, in
the units the field compares (SPEC §6): gap capture, accuracy at the calibrated
threshold (``in_accuracy``), retrieval and LM calls per question, the retrieval calls
needed to match always-retrieve, and the band of random gates.

Data: ``adaptive_gates.bundled.datasets.adarague_outcomes()`` (packaged; no data folder
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

A third setting, *leave one task out*, fits each gate on five tasks' questions and
scores the sixth (gap capture only): what to expect on a data set the gate never saw.

The draft-check gate reads the model's recorded answer without retrieval as its draft
and checks it against one BM25 search (k = 3) over the shared Wikipedia paragraph
corpus (``--corpus``). That corpus holds the HotpotQA and 2WikiMultihopQA questions'
own context paragraphs, so the draft's agreement with the passages is far more telling
on those two tasks than in a deployment: their draft-check figures are optimistic.
Every decision's cost is reported beside its figures: LLM calls and retrievals per
question, and the milliseconds a decision takes beyond the LLM's draft on this
machine (one question at a time, median of 50 questions never seen, the embedder and
retriever not memoised).

Each setting is reported per task and over all 3,000 questions (in the per-task setting
the "all" curve orders questions by scores of six different gates, so only its
decisions' figures are like-for-like with the pooled row). The gate configurations are
those of ``gate_stack_crossval.py`` (its ``VARIANTS``; member fits shared the same way),
with MiniLM as the sentence encoder; no gate here reads an LLM, so an answer costs one
LM call per question.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/adarague_gates.py [--gates NAME ...] [--folds 5] [--corpus PATH]

Writes benchmarks/results/adarague_gates.{md,json} and adarague_gates.png (the pooled
gates' curves over all 3,000 questions).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from _common import DEFAULT_DATA, RESULTS, markdown_table, write_results
from adaptive_gates import CachedEmbedder, DraftCheckGate, Gate
from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, adarague_outcomes
from adaptive_gates.evaluation import (
    ALL,
    cross_fitted_reports,
    gap_capture,
    gate_curve,
    oracle_curve,
    plot_reports,
    random_auc,
)
from adaptive_gates.models.defaults import default_embedder
from adaptive_gates.records.data import OutcomeRecord
from adaptive_gates.records.selfknowledge import outcome_scores
from adaptive_gates.retrieval import BM25Retriever, CachedRetriever
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
    "stacked (question only)": "stacked question only (embedding, blend)",
    "draft-check": "draft-check (BM25 k=3, default combiner)",
}
#: Decisions timed per gate for its cost.
TIMED = 50

#: The per-gate figures the tables show.
FIGURES = ("gap_capture", "in_accuracy", "retrieval_calls", "lm_calls", "calls_to_match_always")


def leave_one_task_out(make: Callable[[], Gate], tasks: dict[str, list[OutcomeRecord]]) -> dict[str, float]:
    """Each task's gap capture by a gate fitted on the other tasks' questions."""
    out = {}
    for task, rows in tasks.items():
        gate = make().fit_outcomes([r for other, kept in tasks.items() if other != task for r in kept], METRIC)
        a, b = outcome_scores(rows, METRIC)
        out[task] = gap_capture(
            gate_curve(gate.score_records(rows), a, b).auc, random_auc(a, b), oracle_curve(a, b).auc
        )
    return out


def decision_ms(make: Callable[[], Gate], records: list[OutcomeRecord]) -> float:
    """Median milliseconds of one decision beyond the LLM: a gate fitted on all but the
    last ``TIMED`` records scores each of those alone (after one warm-up)."""
    gate = make().fit_outcomes(records[:-TIMED], METRIC)
    gate.score_records(records[:1])
    times = []
    for record in records[-TIMED:]:
        start = time.perf_counter()
        gate.score_records([record])
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


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
        "(no gate here asks the LLM but draft-check, whose draft is the recorded answer without retrieval). "
        "Draft-check's figures on hotpotqa and 2wikimultihopqa are optimistic: the corpus it checks drafts "
        "against holds those questions' own paragraphs.",
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
    tasks = results["tasks"]
    held_out = results["leave one task out"]
    sections.append(
        "## leave one task out: oracle-gap capture (fitted on the other five tasks)\n\n"
        + markdown_table(
            ["gate", *tasks, "mean"],
            [
                [gate, *(row[t] for t in tasks), float(np.mean([row[t] for t in tasks]))]
                for gate, row in held_out.items()
            ],
        )
    )
    pooled_all = {gate: rows[ALL] for gate, rows in results["settings"]["pooled"].items()}
    sections.append(
        "## what a decision costs (pooled, at the calibrated threshold)\n\n"
        "LLM calls per question count the answer itself (an answer-first gate's draft is the answer when it does "
        "not retrieve); milliseconds are the decision's own work beyond the LLM on this machine.\n\n"
        + markdown_table(
            ["gate", "LLM calls / question", "retrievals / question", "ms per decision beyond the LLM"],
            [
                [gate, pooled_all[gate]["lm_calls"], pooled_all[gate]["retrieval_calls"], results["decision_ms"][gate]]
                for gate in pooled_all
            ],
        )
    )
    sections.append(
        "Seconds per gate (all settings): " + ", ".join(f"{gate} {s:.0f}" for gate, s in results["seconds"].items())
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
    parser.add_argument(
        "--corpus",
        type=Path,
        default=DEFAULT_DATA / "wiki_paragraph_corpus.jsonl",
        help="the corpus draft-check retrieves from (default: the shared Wikipedia paragraphs)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    share_member_fits()

    tasks = {t: adarague_outcomes(t)[: args.per_task_limit] for t in ADARAGUE_TASKS}
    sentence = CachedEmbedder(default_embedder())
    sentence.embed([r.question for rows in tasks.values() for r in rows])
    # No gate here reads the LM's hidden state: the sentence encoder fills both slots.
    encoders = Encoders(sentence, sentence)
    bm25 = BM25Retriever.from_jsonl(args.corpus) if "draft-check" in args.gates else None
    searched = CachedRetriever(bm25)
    plain = default_embedder()  # the timed gates embed each question afresh

    def factory(gate: str, timed: bool = False) -> Callable[[], Gate]:
        if gate == "draft-check":
            # Llama's recorded drafts were asked plainly: the shipped gate's settings
            return lambda: DraftCheckGate(
                retriever=bm25 if timed else searched,
                embedder=plain if timed else sentence,
                self_report=False,
                agreement="always",
            )
        timed_encoders = Encoders(plain, plain) if timed else encoders
        return lambda v=VARIANTS[GATES[gate]][1]: v(timed_encoders)  # type: ignore[misc]

    results: dict[str, Any] = {
        "metric": METRIC,
        "folds": args.folds,
        "seed": args.seed,
        "tasks": list(tasks),
        "encoder": sentence.model_id,
        "calibration": "objective (best accuracy)",
        "configurations": {g: GATES[g] for g in args.gates},
        "settings": {"per task": {}, "pooled": {}},
        "leave one task out": {},
        "decision_ms": {},
        "seconds": {},
    }
    full: dict[str, dict[str, Any]] = {}
    for gate in tqdm(args.gates, desc="gates"):
        make = factory(gate)
        start = time.perf_counter()
        for setting, pooled in (("per task", False), ("pooled", True)):
            reports = cross_fitted_reports(
                make, tasks, pooled=pooled, name=gate, metric=METRIC, folds=args.folds, seed=args.seed
            )
            results["settings"][setting][gate] = {c: summary(r) for c, r in reports.items()}
            if pooled:
                full[gate] = reports[ALL]
        results["leave one task out"][gate] = leave_one_task_out(make, tasks)
        results["decision_ms"][gate] = decision_ms(
            factory(gate, timed=True), [r for rows in tasks.values() for r in rows]
        )
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
