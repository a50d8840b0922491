"""A draft-check gate learning from what it serves, replayed on recorded outcomes.

For each held-out task, the gate is fitted on the other five tasks' bundled
Llama-3.1-8B outcomes (leave one task out: 2,500 questions, the package's defaults:
rank-averaged logistic heads and boosted trees, "gain" target, MiniLM embedding reduced
to 32 components, BM25 k = 3 over the shared Wikipedia paragraph corpus, or over the
paragraphs bundled with the outcomes when that file is absent). The task's 500
questions then arrive one by one, in a shuffled order, and the gate decides each with
the combiner in force:

- retrieve: the answer is the recorded answer with one retrieval (``pred_one_retrieval``),
  and the pair (draft = ``pred_no_retrieval``, that answer) is learnt from with weight 1;
- answer directly: the answer is the draft; with probability R the answer over the
  passages is read as well (a shadow: counted as one extra LLM call, never served) and
  the pair is learnt from with weight 1/R.

Pairs are graded by agreement (``gates.shadow.pair``: retrieval helps where the answer
over the passages is not contained in the draft), no gold answer is read while
learning, and every N pairs the combiner is refitted on the fit's 2,500 gold rows and
the pairs, weighted (``gates.shadow.refit``: the code the server runs). The decisions
actually made are graded against the gold answers (metric "contains").

Compared with: the same gate never refitted (static), and a gate fitted on the held-out
task's own 500 gold outcomes, cross-fitted (5 folds: each question decided by a gate
fitted on the other 400), at each gate's default threshold.

Figures, over the stream: accuracy of the decisions made, retrieval rate, decision gap
capture ((accuracy − random at the same retrieval rate) / (oracle at that rate − random):
0 = as good as retrieving for a random share as large, 1 = the best such share), the
gap capture of the scores the decisions were taken on (the area under the
accuracy/retrieval curve), LLM calls per question (draft + answers over passages +
shadows) and refits. Means and spreads over seeds (the stream's order, the folds and the
shadow draws).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/shadow_stream.py [--tasks nq squad] [--seeds 0 1 2]
        [--rates 0 0.05 0.2] [--refit-every 50] [--corpus PATH]

Writes benchmarks/results/shadow_stream.{md,json}.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _common import DEFAULT_DATA, markdown_table, write_results
from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, adarague_corpus, adarague_outcomes
from adaptive_gates.evaluation import gap_capture, gate_curve, oracle_curve, random_auc
from adaptive_gates.gates.base.folds import fold_splits
from adaptive_gates.gates.combiner.features import FeatureCombiner, default_threshold, fit_feature_combiner
from adaptive_gates.gates.shadow.observations import FitRows, Observation, agreement_helps, pair, refit
from adaptive_gates.models import cache_dir
from adaptive_gates.records.data import write_jsonl
from adaptive_gates.signals.draft import DRAFT_FEATURE_NAMES
from adaptive_gates.signals.question_features import FEATURE_NAMES
from draft_check import Table, build_table

NAMES = (*FEATURE_NAMES, *DRAFT_FEATURE_NAMES)
#: The bundled outcomes, in the table's order.
RECORDS = adarague_outcomes()
C = 0.05
FOLDS = 5


@dataclass(frozen=True)
class Gate:
    """A fitted combiner and the threshold it decides by."""

    combiner: FeatureCombiner
    threshold: float


def features(table: Table, rows: np.ndarray) -> np.ndarray:
    return np.hstack([table.questions[rows], table.draft[rows]])


def fit(table: Table, rows: np.ndarray, seed: int = 0) -> Gate:
    """The draft-check gate's defaults fitted on ``rows`` (gold outcomes)."""
    x, e, a, b = features(table, rows), table.embedding[rows].astype(np.float64), table.a[rows], table.b[rows]
    combiner = fit_feature_combiner(x, NAMES, a, b, embeddings=e, C=C, seed=seed)
    return Gate(combiner, default_threshold(combiner, x, e, float(np.mean(b > a))))


def graded(scores: np.ndarray, retrieve: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """The decisions' accuracy, retrieval rate and decision gap capture, and the
    scores' gap capture (area under the accuracy/retrieval curve)."""
    accuracy = float(np.where(retrieve, b, a).mean())
    rate = float(retrieve.mean())
    gain = np.sort(b - a)[::-1]
    k = round(rate * len(a))
    oracle = float(a.mean() + gain[:k].sum() / len(a))
    random = float(a.mean() + rate * (b - a).mean())
    capture = (accuracy - random) / (oracle - random) if oracle > random else float("nan")
    auc = gap_capture(gate_curve(scores, a, b).auc, random_auc(a, b), oracle_curve(a, b).auc)
    return {
        "accuracy": accuracy,
        "retrieval_rate": rate,
        "decision_capture": capture,
        "gap_capture": float("nan") if auc is None else auc,
    }


def stream(
    table: Table, gate: Gate, fit_rows: FitRows, held: np.ndarray, order: np.ndarray, rate: float, every: int, seed: int
) -> dict[str, float]:
    """The held-out questions in ``order``, decided by the combiner in force, learning
    from pairs at shadow rate ``rate``, refitting every ``every`` pairs."""
    draws = np.random.default_rng([seed, round(rate * 10_000)]).random(len(order))
    records = RECORDS
    combiner, threshold = gate.combiner, gate.threshold
    entries: list[Observation] = []
    rows: list[int] = []
    scores, retrieve = np.empty(len(order)), np.zeros(len(order), dtype=bool)
    shadows = refits = since = 0
    for i, j in enumerate(held[order]):
        x, e = features(table, np.array([j])), table.embedding[[j]].astype(np.float64)
        scores[i] = combiner.score(x, e)[0]
        retrieve[i] = scores[i] > threshold
        record = records[j]
        if retrieve[i]:
            entry = pair(record.question, record.pred_no_retrieval, record.pred_one_retrieval, "retrieved", 1.0)
        elif draws[i] < rate:
            entry = pair(record.question, record.pred_no_retrieval, record.pred_one_retrieval, "shadow", rate)
            shadows += 1
        else:
            continue
        entries.append(entry)
        rows.append(j)
        since += 1
        if since >= every:
            done = refit(
                gate.combiner,
                fit_rows,
                entries,
                features(table, np.array(rows)),
                table.embedding[rows].astype(np.float64),
                C=C,
            )
            if done is not None:
                combiner, threshold, refits, since = done.combiner, done.threshold, refits + 1, 0
    a, b = table.a[held[order]], table.b[held[order]]
    out = graded(scores, retrieve, a, b)
    n = len(order)
    out.update(
        extra_llm_calls=shadows / n,
        llm_calls=1.0 + out["retrieval_rate"] + shadows / n,
        refits=float(refits),
        pairs=float(len(entries)),
    )
    return out


def cross_fitted(table: Table, held: np.ndarray, seed: int) -> dict[str, float]:
    """The task's own gold outcomes, 5 folds: each question decided by a gate fitted on the others."""
    scores, retrieve = np.empty(len(held)), np.zeros(len(held), dtype=bool)
    for kept, out in fold_splits(len(held), FOLDS, seed):
        gate = fit(table, held[kept], seed)
        scores[out] = gate.combiner.score(features(table, held[out]), table.embedding[held[out]].astype(np.float64))
        retrieve[out] = scores[out] > gate.threshold
    result = graded(scores, retrieve, table.a[held], table.b[held])
    result.update(extra_llm_calls=0.0, llm_calls=1.0 + result["retrieval_rate"], refits=0.0, pairs=0.0)
    return result


FIGURES = ("accuracy", "retrieval_rate", "decision_capture", "gap_capture", "extra_llm_calls", "llm_calls", "refits")


def summary(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        k: {"mean": float(np.nanmean([r[k] for r in runs])), "std": float(np.nanstd([r[k] for r in runs]))}
        for k in FIGURES
    }


def render(results: dict[str, Any]) -> str:
    header = [
        "held-out task",
        "gate",
        "accuracy",
        "retrieval rate",
        "decision capture",
        "gap capture (scores)",
        "extra LLM calls / q",
        "LLM calls / q",
        "refits",
    ]
    body = []
    for task, rows in results["tasks"].items():
        for name, s in rows.items():
            body.append(
                [task, name]
                + [
                    f"{s[k]['mean']:.3f} ± {s[k]['std']:.3f}" if k != "refits" else f"{s[k]['mean']:.1f}"
                    for k in FIGURES
                ]
            )
    mean_rows = []
    names = list(next(iter(results["tasks"].values())))
    for name in names:
        values = [rows[name] for rows in results["tasks"].values()]
        mean_rows.append(["mean of tasks", name] + [f"{np.mean([v[k]['mean'] for v in values]):.3f}" for k in FIGURES])
    return "\n\n".join(
        [
            "# Shadow learning on a stream of recorded outcomes (bundled Llama-3.1-8B, metric contains)",
            f"Command: `{results['command']}`. Each held-out task's 500 questions in a shuffled order, decided by a "
            f"draft-check gate fitted on the other five tasks (2,500 gold outcomes, the package's defaults; BM25 "
            f"k=3 over `{results['corpus']}`), refitted every {results['refit_every']} pairs on its fit rows and the "
            "pairs (agreement labels, 'helps' target, each pair weighted by 1/chance it was observed); shadow rate R "
            "= share of directly answered questions also answered over the passages (an extra LLM call, read from "
            f"the recorded answer). Seeds {results['seeds']} (stream order, folds, shadow draws): mean ± spread "
            "(standard deviation). Static: the same gate never refitted. Own task, cross-fitted: a gate fitted on "
            "the held-out task's own gold outcomes (5 folds). Decision capture: (accuracy − random at the same "
            "retrieval rate) / (oracle at that rate − random). Gap capture (scores): the area under the "
            "accuracy/retrieval curve of the scores each decision was taken on (scores of successive combiners "
            "mixed: a rough figure). The shared corpus holds HotpotQA's and 2WikiMultihopQA's own paragraphs: "
            "figures on those tasks are optimistic.",
            markdown_table(header, body),
            "## Mean over the held-out tasks\n\n" + markdown_table(header, mean_rows),
            f"Ran in {results['seconds']:.0f} s.",
        ]
    )


def corpus_path(requested: Path) -> tuple[Path, str]:
    """The corpus file to search: ``requested`` if it exists, else the bundled paragraphs written once to the cache."""
    if requested.is_file():
        return requested, requested.name
    path = cache_dir() / "benchmarks" / "shadow_stream" / "adarague_corpus.jsonl"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(path, [{"id": r.id, "title": r.title, "text": r.text} for r in adarague_corpus()])
    return path, "the paragraphs bundled with the outcomes (datasets.adarague_corpus)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(ADARAGUE_TASKS), choices=ADARAGUE_TASKS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rates", nargs="+", type=float, default=[0.0, 0.05, 0.2])
    parser.add_argument("--refit-every", type=int, default=50)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_DATA / "wiki_paragraph_corpus.jsonl")
    args = parser.parse_args()
    start = time.perf_counter()
    corpus, corpus_name = corpus_path(args.corpus)
    table = build_table(RECORDS, corpus, 3, "contains")
    results: dict[str, Any] = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/shadow_stream.py --tasks "
        + " ".join(args.tasks)
        + f" --seeds {' '.join(map(str, args.seeds))} --rates {' '.join(map(str, args.rates))} "
        f"--refit-every {args.refit_every}",
        "corpus": corpus_name,
        "refit_every": args.refit_every,
        "seeds": args.seeds,
        "rates": args.rates,
        "tasks": {},
        "runs": {},
    }
    for task in args.tasks:
        t = ADARAGUE_TASKS.index(task)
        held, others = np.flatnonzero(table.task == t), np.flatnonzero(table.task != t)
        gate = fit(table, others)
        helps = agreement_helps([RECORDS[j] for j in others])
        fit_rows = FitRows(features(table, others), table.embedding[others].astype(np.float64), helps)
        empty = np.empty((0, len(NAMES)))
        relabelled = refit(gate.combiner, fit_rows, [], empty, np.empty((0, table.embedding.shape[1])), C=C)
        assert relabelled is not None
        control = Gate(relabelled.combiner, relabelled.threshold)
        runs: dict[str, list[dict[str, float]]] = {"static (never refitted)": [], "static, agreement labels": []}
        for seed in args.seeds:
            order = np.random.default_rng(seed).permutation(len(held))
            static = stream(table, gate, fit_rows, held, order, 0.0, len(held) + 1, seed)
            runs["static (never refitted)"].append(static)
            runs["static, agreement labels"].append(
                stream(table, control, fit_rows, held, order, 0.0, len(held) + 1, seed)
            )
            c = runs["static, agreement labels"][-1]
            print(
                f"{task:>16} seed {seed} agreement-labelled static: acc {c['accuracy']:.3f} "
                f"capture {c['decision_capture']:+.3f} rate {c['retrieval_rate']:.2f}",
                flush=True,
            )
            for rate in args.rates:
                name = f"shadow R={rate:g}"
                runs.setdefault(name, []).append(
                    stream(table, gate, fit_rows, held, order, rate, args.refit_every, seed)
                )
                r = runs[name][-1]
                print(
                    f"{task:>16} seed {seed} {name:<14} acc {r['accuracy']:.3f} (static {static['accuracy']:.3f}) "
                    f"capture {r['decision_capture']:+.3f} (static {static['decision_capture']:+.3f}) "
                    f"rate {r['retrieval_rate']:.2f} refits {r['refits']:.0f}",
                    flush=True,
                )
            runs.setdefault("own task, cross-fitted (gold)", []).append(cross_fitted(table, held, seed))
        results["runs"][task] = runs
        results["tasks"][task] = {name: summary(r) for name, r in runs.items()}
    results["seconds"] = time.perf_counter() - start
    markdown = render(results)
    print(markdown)
    for path in write_results("shadow_stream", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
