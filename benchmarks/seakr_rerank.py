"""SeaKR's uncertainty re-ranker alone, on HotpotQA paragraphs: does the lowest-U snippet
pick the paragraph that holds the answer more often than chance?

Questions: the AdaRAGUE HotpotQA questions (HotpotQA dev) whose supporting paragraphs are
in the shared corpus, exactly one of which contains an answer string (case-insensitive),
whose answer is not yes/no and which have at least two distractor paragraphs in the
corpus; the first ``--n`` (40). Gold = that answer-bearing paragraph. Each question is
re-ranked twice, three candidates each (order shuffled, seeded):

- **hard**: gold + two of the question's own HotpotQA distractor paragraphs (chosen by
  HotpotQA to look relevant);
- **easy**: gold + two paragraphs drawn at random from the whole corpus.

Chance is 1/3 in both. Estimators (``--samples`` k, ``--max-new-tokens``, the simple-QA
re-ranking prompt, stop "\\n"):

- **seakr**: SPEC §4.1 settings (MLP output of the middle layer, T 1.0, top-k 50, top-p 0.9);
- **inside**: INSIDE's settings (``SelfAwareUncertainty.inside``: residual stream,
  ``torch.cov``, log10, T 0.5; k=10 there);
- **seakr T=0.3**: SeaKR's settings at a lower temperature.

Reported per estimator and condition: how often the lowest-U snippet is gold, the exact
two-sided binomial p-value against 1/3, and the mean U of gold minus the mean U of the
two others (negative = the gold paragraph leaves the model surer, as SeaKR assumes).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/seakr_rerank.py [--n 40] [--samples 8] [--max-new-tokens 16]

Writes benchmarks/results/seakr_rerank.{md,json} (questions by id, no data text).
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from typing import Any

import numpy as np

from _common import HotpotContext, add_data_argument, hotpotqa_contexts, markdown_table, write_results
from adaptive_gates import SelfAwareUncertainty, UncertaintyReranker
from adaptive_gates.records.data import CorpusRecord, load_corpus

CONDITIONS = ("hard", "easy")
CHANCE = 1 / 3


def answer_bearing(context: HotpotContext) -> CorpusRecord | None:
    """The one supporting paragraph that contains an answer; ``None`` when not exactly one
    does, the answer is yes/no, or fewer than two distractors are in the corpus."""
    answers = [a.lower() for a in context.answers]
    if any(a in ("yes", "no") for a in answers) or len(context.others) < 2:
        return None
    bearing = [p for p in context.supporting if any(a in p.text.lower() for a in answers)]
    return bearing[0] if len(bearing) == 1 else None


def estimators(lm: Any, samples: int, max_new_tokens: int) -> dict[str, SelfAwareUncertainty]:
    return {
        "seakr": SelfAwareUncertainty(lm, k=samples, max_new_tokens=max_new_tokens),
        "inside": SelfAwareUncertainty.inside(lm, max_new_tokens=max_new_tokens),
        "seakr T=0.3": SelfAwareUncertainty(lm, k=samples, max_new_tokens=max_new_tokens, temperature=0.3),
    }


def summarise(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """First-choice gold rate, binomial p-value against chance and mean U gap per cell."""
    from scipy.stats import binomtest

    cells = []
    for name in names:
        for condition in CONDITIONS:
            picks = [r["estimators"][name] for r in rows if r["condition"] == condition]
            hits = sum(p["first_is_gold"] for p in picks)
            gaps = [
                p["gold_u"] - float(np.mean(p["other_u"]))
                for p in picks
                if np.isfinite(p["gold_u"]) and np.all(np.isfinite(p["other_u"]))
            ]
            cells.append(
                {
                    "estimator": name,
                    "condition": condition,
                    "n": len(picks),
                    "first_is_gold": hits / len(picks),
                    "p_value_vs_chance": binomtest(hits, len(picks), CHANCE).pvalue,
                    "mean_gold_minus_other_u": float(np.mean(gaps)) if gaps else None,
                }
            )
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--n", type=int, default=40, help="questions (default 40)")
    parser.add_argument("--samples", type=int, default=8, help="k for the SeaKR estimators (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="sample length cap (default 16)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the candidate draws and order")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    from adaptive_gates.models.defaults import default_llm

    torch.set_num_threads(1)
    corpus = load_corpus(args.data / "wiki_paragraph_corpus.jsonl")
    chosen = [(c, g) for c in hotpotqa_contexts(args.data, corpus) if (g := answer_bearing(c))][: args.n]
    rng = random.Random(args.seed)
    lm = default_llm()
    rerankers = {name: UncertaintyReranker(u) for name, u in estimators(lm, args.samples, args.max_new_tokens).items()}
    rows, start = [], time.perf_counter()
    for i, (context, gold) in enumerate(chosen):
        own = {p.id for p in context.supporting + context.others}
        draws = {
            "hard": rng.sample(context.others, 2),
            "easy": rng.sample([p for p in rng.sample(corpus, 10) if p.id not in own], 2),
        }
        for condition, distractors in draws.items():
            candidates = [gold, *distractors]
            rng.shuffle(candidates)
            row: dict[str, Any] = {
                "gold": gold.id,
                "candidates": [p.id for p in candidates],
                "condition": condition,
                "estimators": {},
            }
            for name, reranker in rerankers.items():
                ranked = reranker.rerank(context.question, [p.text for p in candidates])
                u = {candidates[r.index].id: r.uncertainty for r in ranked}
                row["estimators"][name] = {
                    "first_is_gold": candidates[ranked[0].index].id == gold.id,
                    "gold_u": u[gold.id],
                    "other_u": [u[p.id] for p in distractors],
                }
            rows.append(row)
        print(f"question {i + 1}/{len(chosen)}, {time.perf_counter() - start:.0f} s", flush=True)

    cells = summarise(rows, list(rerankers))
    markdown = "\n\n".join(
        [
            f"# SeaKR's re-ranker on {len(chosen)} HotpotQA questions (SmolLM2-135M, k={args.samples} "
            f"(inside: 10), {args.max_new_tokens} new tokens)",
            "Three candidates per re-ranking (chance 1/3); gold = the supporting paragraph holding the answer.",
            markdown_table(
                ["estimator", "condition", "n", "lowest-U is gold", "p vs 1/3", "mean U gold − others"],
                [
                    [
                        c["estimator"],
                        c["condition"],
                        c["n"],
                        c["first_is_gold"],
                        c["p_value_vs_chance"],
                        c["mean_gold_minus_other_u"],
                    ]
                    for c in cells
                ],
            ),
        ]
    )
    print(markdown)
    results = {"settings": {k: v for k, v in vars(args).items() if k != "data"}, "summary": cells, "rows": rows}
    for path in write_results("seakr_rerank", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
