"""Decision quality of a cascade against the LLM calls the gating itself costs.

Cheap stage: the balanced SKR classifier (MiniLM) fitted on the AdaRAGUE NQ outcome
records outside the sample (no LLM call). Costly stage: ``VerbalizedGate`` (vanilla
prompt) on the embedded SmolLM2. The sample: ``--n`` NQ records (seeded). For each
escalation share from 0 to 1 the band is fitted on the sample's cheap scores (no
outcome is used) and the real ``CascadeGate`` decides the sample; the gating LLM calls
are counted by an LLM-call listener. Quality is judged on the records' Llama-3.1-8B
outcomes (``contains``): accuracy of the decisions at their realised retrieval rate,
that accuracy minus a random gate's at the same rate, and gap capture / AUROC of the
cascade's need scores.

SmolLM2 is slow on CPU (about 1-3 s a question here), so the sample is small and its
figures are noisy (±0.1 AUROC at n = 60); the embedded LLM's certainty speaks of its
own knowledge, not of the Llama model whose answers are scored. ``--outcomes
boolq-smollm2`` takes the case where it does: the sample and the cheap gate's training
rows are the embedded SmolLM2's own outcomes on packaged BoolQ questions (1,000
collected once and cached; the sample is drawn from them, the cheap gate learns from
the rest). Replies are memoised, so every share reuses the generations of the first
run (all escalated): the cascade still asks for each, and the listener counts each
request.

    .venv/bin/python benchmarks/cascade_cost.py [--data DIR] [--n 60] [--seed 0] [--outcomes boolq-smollm2]

Writes benchmarks/results/cascade_cost.{md,json,png} (or cascade_cost_boolq_smollm2.*).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from _common import RESULTS, adarague_path, add_data_argument, markdown_table, smollm2_boolq, write_results
from adaptive_gates import CascadeGate, SKRClassifierGate, VerbalizedGate, listening, load_outcomes, outcome_scores
from adaptive_gates.evaluation import evaluate_scores
from adaptive_gates.models.chat.base import ChatReply
from adaptive_gates.models.chat.local import LocalChatModel
from adaptive_gates.models.defaults import default_embedder
from adaptive_gates.models.embedding.cached import CachedEmbedder

#: --outcomes -> what the header calls the sample.
OUTCOMES = {
    "adarague-nq": "AdaRAGUE NQ questions answered by Llama-3.1-8B",
    "boolq-smollm2": "packaged BoolQ questions answered by the embedded SmolLM2",
}
SHARES = (1.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # all first: it fills the memo


class MemoChat:
    """The embedded chat model, each distinct request generated once (greedy decoding
    makes the reply a function of the request)."""

    def __init__(self, model: LocalChatModel) -> None:
        self.model = model
        self._replies: dict[str, ChatReply] = {}
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.model.model_id

    def chat(self, messages: Sequence[dict[str, str]], **options: Any) -> ChatReply:
        return self.chat_batch([messages], **options)[0]

    def chat_batch(self, conversations: Sequence[Sequence[dict[str, str]]], **options: Any) -> list[ChatReply]:
        keys = [json.dumps([list(map(dict, c)), sorted(options.items())], sort_keys=True) for c in conversations]
        missing = [i for i, k in enumerate(keys) if k not in self._replies]
        if missing:
            replies = self.model.chat_batch([conversations[i] for i in missing], **options)
            with self._lock:
                self._replies.update((keys[i], r) for i, r in zip(missing, replies))
        return [self._replies[k] for k in keys]


class CallCounter:
    def __init__(self) -> None:
        self.calls = 0

    def on_llm_call(self, event: object) -> None:
        self.calls += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--outcomes",
        default="adarague-nq",
        choices=tuple(OUTCOMES),
        help="whose outcomes judge the cascade (default: Llama-3.1-8B's on AdaRAGUE NQ)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    records = load_outcomes(adarague_path(args.data, "nq")) if args.outcomes == "adarague-nq" else smollm2_boolq(1000)
    chosen = set(np.random.default_rng(args.seed).permutation(len(records))[: args.n].tolist())
    sample = [r for i, r in enumerate(records) if i in chosen]
    cheap = SKRClassifierGate(CachedEmbedder(default_embedder()), class_weight="balanced").fit_outcomes(
        [r for i, r in enumerate(records) if i not in chosen]
    )
    costly = VerbalizedGate(MemoChat(LocalChatModel()))
    questions = [r.question for r in sample]
    a, b = outcome_scores(sample)
    cheap_scores = cheap.score(questions)
    rows, runs = [], []
    for share in SHARES:
        cascade = CascadeGate(cheap, costly, escalation_rate=share).fit_band_scores(cheap_scores)
        counter = CallCounter()
        with listening(counter):
            decisions = cascade.decide_batch(questions)
        retrieve = np.array([d.retrieve for d in decisions])
        scores = np.array([d.score for d in decisions])
        fallbacks = int(np.isnan(scores).sum())
        scores = np.where(np.isnan(scores), np.nanmax(scores) + 1, scores)  # a fallback retrieves: rank it first
        report = evaluate_scores(scores, a, b, gate="cascade", metric="contains", retrieve=retrieve)
        at = report["at_threshold"]
        random_accuracy = a.mean() + at["retrieval_rate"] * (b.mean() - a.mean())
        escalated = sum(d.details.get("stage") == "costly" or "costly" in d.details for d in decisions)
        run = {
            "share": share,
            "escalated": escalated,
            "llm_calls": counter.calls,
            "calls_per_question": counter.calls / len(questions),
            "retrieval_rate": at["retrieval_rate"],
            "accuracy": at["accuracy"],
            "accuracy_vs_random": at["accuracy"] - random_accuracy,
            "gap_capture": report["gap_capture"],
            "auroc": report["decision_auroc"],
            "fallbacks": fallbacks,
            "band": cascade.band_,
        }
        runs.append(run)
        logging.getLogger("cascade_cost").error("share %.1f: %s", share, {k: v for k, v in run.items()})
    runs.sort(key=lambda r: r["share"])
    for r in runs:
        rows.append(
            [
                r["share"],
                r["escalated"],
                r["llm_calls"],
                r["calls_per_question"],
                r["retrieval_rate"],
                r["accuracy"],
                r["accuracy_vs_random"],
                r["gap_capture"],
                r["auroc"],
                r["fallbacks"],
            ]
        )
    table = markdown_table(
        [
            "escalation share",
            "escalated",
            "gating LLM calls",
            "calls / question",
            "retrieval rate",
            "accuracy",
            "accuracy − random",
            "gap capture",
            "AUROC",
            "fallbacks",
        ],
        rows,
    )
    header = (
        f"# Cascade: quality against gating LLM calls\n\n{len(sample)} {OUTCOMES[args.outcomes]} (seed {args.seed}); "
        f"never retrieve {a.mean():.3f}, always {b.mean():.3f}, oracle {np.maximum(a, b).mean():.3f}.\n"
    )
    markdown = f"{header}\n{table}\n"
    name = "cascade_cost" if args.outcomes == "adarague-nq" else "cascade_cost_boolq_smollm2"
    write_results(name, markdown, {"outcomes": args.outcomes, "n": len(sample), "seed": args.seed, "runs": runs})
    plot(runs, RESULTS / f"{name}.png")
    print(markdown)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    calls = [r["calls_per_question"] for r in runs]
    left.plot(calls, [r["accuracy_vs_random"] for r in runs], "o-")
    left.axhline(0, color="grey", lw=0.8)
    left.set_xlabel("gating LLM calls per question")
    left.set_ylabel("accuracy − random gate at the same rate")
    right.plot(calls, [r["gap_capture"] for r in runs], "o-", label="gap capture")
    right.plot(calls, [r["auroc"] for r in runs], "s-", label="AUROC")
    right.set_xlabel("gating LLM calls per question")
    right.legend()
    for ax in (left, right):
        for r, x in zip(runs, calls):
            ax.annotate(f"{r['share']:.1f}", (x, ax.get_ylim()[0]), fontsize=7, ha="center", va="bottom")
    fig.suptitle(
        "Cascade (balanced SKR classifier → verbalized SmolLM2): quality vs gating cost (labels: escalation share)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
