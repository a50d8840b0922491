"""What SeaKR's uncertainty U (k=20) costs next to one greedy answer, on real NQ questions.

For each question (the project's plain-QA answer prompt, stop "\\n") and each token
budget, four ways are timed side by side, their order rotated question by question:

- **greedy**: one ``lm.generate`` of the same prompt with the same ``max_new_tokens``;
- **greedy, same length**: one greedy generation of the same prompt forced to as many new
  tokens as U's longest sample (EOS and stop strings ignored): the cost of one answer as
  long as U's decoding loop runs, the like-for-like base of "20 samples cost k x one";
- **U**: ``SelfAwareUncertainty(k=20).estimate`` (one decoding loop: shared prefill,
  finished samples read at their EOS and dropped from the batch);
- **sample + pass**: ``lm.sample(k=20)`` (one batched ``generate``) followed by one
  right-padded forward pass over prompt + samples with a hook, the textbook form;
- **naive**: 20 single-sample ``lm.sample`` calls and 20 single forward passes.

Budgets: 100 new tokens (SPEC §4.1) and 24 (the project answerer's greedy budget).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/seakr_cost.py [--questions PATH] [--n 5]

Writes benchmarks/results/seakr_cost.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _common import DEFAULT_DATA, markdown_table, write_results
from adaptive_gates.answering import build_prompt
from adaptive_gates.models import LocalCausalLM, default_llm
from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty, eigen_score

K = 20
BUDGETS = (100, 24)
STOP = ["\n"]
METHODS = ("greedy", "greedy, same length", "U", "sample + pass", "naive")


def closed_states(lm: LocalCausalLM, prompt: str, generations: list, module_path: str) -> np.ndarray:
    """States at the closing EOS of each sample from one right-padded forward pass
    over prompt + sample (EOS replacing a stop token, appended after the length cap)."""
    import torch

    prompt_ids = lm.tokenizer(lm.format_prompt(prompt)).input_ids
    eos = lm.eos_token_id
    rows = []
    for g in generations:
        ids = list(g.token_ids)
        if g.finish_reason == "stop":
            ids[-1] = eos
        elif g.finish_reason == "length":
            ids.append(eos)
        rows.append(prompt_ids + ids)
    width = max(map(len, rows))
    ids = torch.tensor([r + [eos] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    with lm.capture(module_path) as out, torch.inference_mode():
        lm.model.base_model(input_ids=ids, attention_mask=mask)  # no LM head: only the state is read
    return np.stack([out[0][i, len(r) - 1].numpy() for i, r in enumerate(rows)])


def u_of(states: np.ndarray, generations: list) -> float:
    usable = [i for i, g in enumerate(generations) if g.text.strip()]
    return eigen_score(states[usable]) if usable else float("nan")


def measure(lm: LocalCausalLM, question: str, budget: int, order: list[str]) -> dict[str, Any]:
    """Seconds of each method on one question (in ``order``), plus what drives them."""
    prompt = build_prompt(question)
    estimator = SelfAwareUncertainty(lm, k=K, max_new_tokens=budget)
    path = estimator.module_path
    # U's own draws, untimed (seeded: the timed call draws the same): their lengths drive its cost.
    probes = lm.sample_with_states(prompt, K, module_path=path, max_new_tokens=budget, stop=STOP)
    lengths = [len(p.generation.token_ids) for p in probes]
    info: dict[str, Any] = {"U_sample_tokens_mean": float(np.mean(lengths)), "U_sample_tokens_max": max(lengths)}

    def greedy() -> None:
        info["greedy_tokens"] = len(lm.generate(prompt, max_new_tokens=budget, stop=STOP)[0].token_ids)

    def greedy_same_length() -> None:
        import torch

        enc = lm.tokenizer(lm.format_prompt(prompt), return_tensors="pt")
        with torch.inference_mode():
            lm.model.generate(
                **enc,
                do_sample=False,
                min_new_tokens=max(lengths),
                max_new_tokens=max(lengths),
                pad_token_id=lm.tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_logits=True,
            )

    def uncertainty() -> None:
        info["U"] = estimator.estimate(prompt, stop=STOP).value

    def sample_and_pass() -> None:
        gens = lm.sample(prompt, K, max_new_tokens=budget, stop=STOP)
        info["U_sample_pass"] = u_of(closed_states(lm, prompt, gens, path), gens)

    def naive() -> None:
        gens = [lm.sample(prompt, 1, max_new_tokens=budget, stop=STOP, seed=s)[0] for s in range(K)]
        states = np.concatenate([closed_states(lm, prompt, [g], path) for g in gens])
        info["U_naive"] = u_of(states, gens)

    calls: dict[str, Callable[[], None]] = {
        "greedy": greedy,
        "greedy, same length": greedy_same_length,
        "U": uncertainty,
        "sample + pass": sample_and_pass,
        "naive": naive,
    }
    seconds = {}
    for name in order:
        start = time.perf_counter()
        calls[name]()
        seconds[name] = time.perf_counter() - start
    return {"question": question, "budget": budget, "seconds": seconds, **info}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median seconds per method and median per-question ratios."""
    sec = {m: np.array([r["seconds"][m] for r in rows]) for m in METHODS}
    return {
        "median_seconds": {m: float(np.median(v)) for m, v in sec.items()},
        "median_ratio_U_over_greedy": float(np.median(sec["U"] / sec["greedy"])),
        "median_ratio_U_over_greedy_same_length": float(np.median(sec["U"] / sec["greedy, same length"])),
        "median_ratio_sample_pass_over_U": float(np.median(sec["sample + pass"] / sec["U"])),
        "median_ratio_naive_over_U": float(np.median(sec["naive"] / sec["U"])),
        "median_greedy_tokens": float(np.median([r["greedy_tokens"] for r in rows])),
        "median_U_sample_tokens_max": float(np.median([r["U_sample_tokens_max"] for r in rows])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = DEFAULT_DATA / "nq_open_dev.jsonl"
    parser.add_argument("--questions", type=Path, default=default, help=f"QA JSONL (default: {default})")
    parser.add_argument("--n", type=int, default=5, help="questions to time (default: 5)")
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

    results: dict[str, Any] = {"k": K, "stop": STOP, "threads": args.threads, "budgets": {}}
    for budget in BUDGETS:
        rows = []
        for i, question in enumerate(questions):
            order = list(METHODS[i % len(METHODS) :] + METHODS[: i % len(METHODS)])
            # Results name questions by id: the data set's text stays out of them.
            rows.append({**measure(lm, question, budget, order), "question": records[i]["id"]})
            print(
                f"budget {budget}, question {i}: " + ", ".join(f"{m} {s:.2f}s" for m, s in rows[-1]["seconds"].items()),
                flush=True,
            )
        results["budgets"][str(budget)] = {"summary": summarise(rows), "questions": rows}

    table = []
    for budget, block in results["budgets"].items():
        s = block["summary"]
        table.append(
            [
                budget,
                *(s["median_seconds"][m] for m in METHODS),
                s["median_ratio_U_over_greedy"],
                s["median_ratio_U_over_greedy_same_length"],
                s["median_ratio_sample_pass_over_U"],
                s["median_ratio_naive_over_U"],
                s["median_greedy_tokens"],
                s["median_U_sample_tokens_max"],
            ]
        )
    per_question = [
        [
            r["budget"],
            r["question"],
            r["greedy_tokens"],
            r["U_sample_tokens_max"],
            *(r["seconds"][m] for m in METHODS),
            r["seconds"]["U"] / r["seconds"]["greedy"],
            r["seconds"]["U"] / r["seconds"]["greedy, same length"],
        ]
        for block in results["budgets"].values()
        for r in block["questions"]
    ]
    markdown = "\n\n".join(
        [
            f"# Cost of SeaKR's U (k={K}) on {len(questions)} NQ questions ({args.threads} torch thread)",
            "Median seconds per question; ratios are medians of the per-question ratios.",
            markdown_table(
                [
                    "max_new_tokens",
                    *(f"{m} s" for m in METHODS),
                    "U / greedy",
                    "U / greedy same length",
                    "(sample + pass) / U",
                    "naive / U",
                    "greedy tokens",
                    "U's longest sample tokens",
                ],
                table,
            ),
            "## Per question",
            markdown_table(
                [
                    "max_new_tokens",
                    "question",
                    "greedy tokens",
                    "U's longest sample",
                    *(f"{m} s" for m in METHODS),
                    "U / greedy",
                    "U / greedy same length",
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
