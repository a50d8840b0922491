"""What SeaKR's uncertainty U (k=20) costs next to one greedy answer, on real NQ questions,
with and without the estimator's time savers, and whether they change its decisions.

For each question (the project's plain-QA answer prompt, stop "\\n") and each token
budget, four calls are timed side by side, their order rotated question by question:

- **greedy**: one ``lm.generate`` of the same prompt and budget, as it stops;
- **U paper**: ``SelfAwareUncertainty(k=20)``, the paper's settings (one decoding loop:
  shared prefill, k rows per step, finished samples read at their EOS and dropped);
- **U capped**: the same with ``cap_to_greedy=True``, given the greedy answer's length
  (as the gate's pseudo-step gives it);
- **U fast**: ``SelfAwareUncertainty.fast`` (capped, and ``early_stop=5``: the first 5
  samples are drawn alone and, when they agree, the other 15 are not).

Decisions: on the timed questions, each setting's threshold is the median of its own U
(a gate calibrated for a 50 % retrieval rate on them); the report counts the questions
whose decision differs from the paper setting's, and the rank correlation of the U's.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/seakr_cost.py [--questions PATH] [--n 10]

Writes benchmarks/results/seakr_cost.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from _common import DEFAULT_DATA, markdown_table, write_results
from adaptive_gates.answering.answerer import build_prompt
from adaptive_gates.models import LocalCausalLM, default_llm
from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty

K = 20
BUDGETS = (100, 24)
STOP = ["\n"]
METHODS = ("greedy", "U paper", "U capped", "U fast")
VARIANTS = METHODS[1:]


def estimators(lm: LocalCausalLM, budget: int) -> dict[str, SelfAwareUncertainty]:
    return {
        "U paper": SelfAwareUncertainty(lm, k=K, max_new_tokens=budget),
        "U capped": SelfAwareUncertainty(lm, k=K, max_new_tokens=budget, cap_to_greedy=True),
        "U fast": SelfAwareUncertainty.fast(lm, k=K, max_new_tokens=budget),
    }


def measure(lm: LocalCausalLM, question: str, budget: int, order: list[str]) -> dict[str, Any]:
    """Seconds of each call on one question (in ``order``), U of each setting, and lengths."""
    prompt = build_prompt(question)
    greedy_tokens = len(lm.generate(prompt, max_new_tokens=budget, stop=STOP)[0].token_ids)  # untimed: deterministic
    info: dict[str, Any] = {"greedy_tokens": greedy_tokens, "U": {}, "n_samples": {}, "stopped_early": {}}

    def uncertainty(name: str, estimator: SelfAwareUncertainty) -> Callable[[], None]:
        def call() -> None:
            estimate = estimator.estimate(prompt, stop=STOP, greedy_tokens=greedy_tokens)
            info["U"][name] = estimate.value
            info["n_samples"][name] = estimate.n_samples
            info["stopped_early"][name] = estimate.stopped_early

        return call

    calls: dict[str, Callable[[], None]] = {
        "greedy": lambda: lm.generate(prompt, max_new_tokens=budget, stop=STOP),
        **{name: uncertainty(name, e) for name, e in estimators(lm, budget).items()},
    }
    seconds = {}
    for name in order:
        start = time.perf_counter()
        calls[name]()
        seconds[name] = time.perf_counter() - start
    return {"budget": budget, "seconds": seconds, **info}


def decisions(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per setting: decisions that differ from the paper's at each one's median threshold,
    and the rank correlation of its U with the paper's."""
    paper = np.array([r["U"]["U paper"] for r in rows])
    retrieve_paper = paper > np.median(paper)
    out = {}
    for name in VARIANTS[1:]:
        u = np.array([r["U"][name] for r in rows])
        out[name] = {
            "decisions_changed": int(np.sum((u > np.median(u)) != retrieve_paper)),
            "spearman_with_paper": float(spearmanr(paper, u).statistic),
            "stopped_early": int(sum(r["stopped_early"][name] for r in rows)),
        }
    return out


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median seconds per call, median per-question ratios to greedy, and the decisions."""
    sec = {m: np.array([r["seconds"][m] for r in rows]) for m in METHODS}
    return {
        "median_seconds": {m: float(np.median(v)) for m, v in sec.items()},
        "median_ratio_to_greedy": {m: float(np.median(sec[m] / sec["greedy"])) for m in VARIANTS},
        "median_greedy_tokens": float(np.median([r["greedy_tokens"] for r in rows])),
        "decisions": decisions(rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = DEFAULT_DATA / "nq_open_dev.jsonl"
    parser.add_argument("--questions", type=Path, default=default, help=f"QA JSONL (default: {default})")
    parser.add_argument("--n", type=int, default=10, help="questions to time (default: 10)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    with args.questions.open(encoding="utf-8") as fh:
        records = [json.loads(line) for _, line in zip(range(args.n), fh)]
    questions = [r["question"] for r in records]
    lm = default_llm()
    lm.generate(build_prompt(questions[0]), max_new_tokens=4)  # load and warm up

    load_before = os.getloadavg()
    results: dict[str, Any] = {"k": K, "stop": STOP, "threads": args.threads, "budgets": {}}
    for budget in BUDGETS:
        rows = []
        for i, question in enumerate(questions):
            order = list(METHODS[i % len(METHODS) :] + METHODS[: i % len(METHODS)])
            # Results name questions by id: the data set's text stays out of them.
            rows.append({"question": records[i]["id"], **measure(lm, question, budget, order)})
            print(
                f"budget {budget}, question {i}: " + ", ".join(f"{m} {s:.2f}s" for m, s in rows[-1]["seconds"].items()),
                flush=True,
            )
        results["budgets"][str(budget)] = {"summary": summarise(rows), "questions": rows}
    results["load_average_1_5_15"] = {"before": load_before, "after": os.getloadavg()}

    table, changes, per_question = [], [], []
    for budget, block in results["budgets"].items():
        s = block["summary"]
        table.append(
            [
                budget,
                *(s["median_seconds"][m] for m in METHODS),
                *(s["median_ratio_to_greedy"][m] for m in VARIANTS),
                s["median_greedy_tokens"],
            ]
        )
        for name, d in s["decisions"].items():
            changes.append([budget, name, d["decisions_changed"], d["spearman_with_paper"], d["stopped_early"]])
        for r in block["questions"]:
            per_question.append(
                [
                    budget,
                    r["question"],
                    r["greedy_tokens"],
                    *(r["seconds"][m] for m in METHODS),
                    *(r["U"][m] for m in VARIANTS),
                    r["n_samples"]["U fast"],
                ]
            )
    load = results["load_average_1_5_15"]
    markdown = "\n\n".join(
        [
            f"# Cost of SeaKR's U (k={K}) on {len(questions)} NQ questions ({args.threads} torch thread)",
            "Median seconds per question; ratios are medians of the per-question ratios to the greedy "
            f"answer as it stops. Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load['before'])}; "
            f"after: {', '.join(f'{x:.2f}' for x in load['after'])} (2 cores, shared).",
            markdown_table(
                [
                    "max_new_tokens",
                    *(f"{m} s" for m in METHODS),
                    *(f"{m} / greedy" for m in VARIANTS),
                    "greedy tokens",
                ],
                table,
            ),
            "## Decisions against the paper setting",
            f"Each setting's threshold is the median of its own U over the {len(questions)} questions.",
            markdown_table(
                ["max_new_tokens", "setting", "decisions changed", "rank correlation with U paper", "stopped early"],
                changes,
            ),
            "## Per question",
            markdown_table(
                [
                    "max_new_tokens",
                    "question",
                    "greedy tokens",
                    *(f"{m} s" for m in METHODS),
                    *VARIANTS,
                    "U fast samples",
                ],
                per_question,
            ),
        ]
    )
    print(markdown)
    for path in write_results("seakr_cost", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
