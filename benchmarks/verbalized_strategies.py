"""When-to-Retrieve's Table 3 for the embedded SmolLM2, and what draft reuse saves.

For NQ-open dev and TruthfulQA (the first ``--n`` questions of each), every verbalized
strategy (plus SKR-prompt for comparison) is run live: the gate decides, the answer
without retrieval is the gate's draft (or a plain QA call when the reply held none),
and the answer with retrieval uses BM25 top-3 from the shared Wikipedia paragraphs.
Answers with passages do not depend on the strategy, so they are computed once and
shared (a memoising answerer). Reported per strategy: the five alignment metrics,
retrieval calls, accuracy at the gate's own decisions, never / always / oracle and the
gap capture of the need score; one accuracy-vs-retrieval plot per data set.

Draft reuse: for up to 20 questions the gate answered confidently, a plain QA call is
timed on its own (batch 1): the latency the direct branch saves by not making it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/verbalized_strategies.py [--n 200]

Writes benchmarks/results/verbalized_strategies.{md,json} and one PNG per data set.
Greedy decoding throughout (the authors used the API default temperature 1.0).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Sequence
from typing import Any

from _common import RESULTS, add_data_argument, markdown_table, write_results
from adaptive_gates import SKRPromptGate, VerbalizedGate, load_qa
from adaptive_gates.answering.answerer import LLMAnswerer
from adaptive_gates.answering.prompts import STRATEGIES
from adaptive_gates.evaluation import evaluate_live, plot_reports
from adaptive_gates.models.chat.local import LocalChatModel
from adaptive_gates.retrieval import BM25Retriever

DATASETS = {"nq": "nq_open_dev.jsonl", "truthfulqa": "truthfulqa.jsonl"}
TIMED_DRAFTS = 20


class MemoAnswerer:
    """The real answerer, remembering answers by (question, passages)."""

    def __init__(self, inner: LLMAnswerer) -> None:
        self.inner = inner
        self._memo: dict[tuple[str, tuple[str, ...] | None], str] = {}

    def answer_batch(self, questions: Sequence[str], passages: Sequence[Sequence[str]] | None = None) -> list[str]:
        keys = [(q, tuple(passages[i]) if passages is not None else None) for i, q in enumerate(questions)]
        todo = [i for i, key in enumerate(keys) if key not in self._memo]
        if todo:
            fresh = self.inner.answer_batch(
                [questions[i] for i in todo], [passages[i] for i in todo] if passages is not None else None
            )
            self._memo.update({keys[i]: text for i, text in zip(todo, fresh)})
        return [self._memo[key] for key in keys]


def draft_savings(report: dict[str, Any], answerer: LLMAnswerer) -> dict[str, Any] | None:
    """Median seconds of the plain QA call a confident reply's draft makes unnecessary."""
    drafted = [q for q in report["questions"] if not q["retrieve"] and q["details"].get("answer")]
    if not drafted:
        return None
    seconds = []
    for row in drafted[:TIMED_DRAFTS]:
        start = time.perf_counter()
        answerer.answer(row["question"])
        seconds.append(time.perf_counter() - start)
    gate_seconds = report["seconds_per_question"]["gate"]
    saved = statistics.median(seconds)
    return {
        "confident_with_draft": len(drafted),
        "timed": len(seconds),
        "direct_answer_s_median": saved,
        "gate_s_per_question": gate_seconds,
        "saved_share_of_decide_plus_answer": saved / (gate_seconds + saved),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--n", type=int, default=200, help="questions per data set")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    chat = LocalChatModel(batch_size=args.batch_size)
    retriever = BM25Retriever.from_jsonl(args.data / "wiki_paragraph_corpus.jsonl")
    plain = LLMAnswerer(chat, style="when-to-retrieve", batch_size=args.batch_size)
    results: dict[str, Any] = {"n_per_dataset": args.n, "datasets": {}}
    sections = []
    for dataset in args.datasets:
        records = load_qa(args.data / DATASETS[dataset])[: args.n]
        answerer = MemoAnswerer(plain)
        gates = [VerbalizedGate(chat, strategy=s) for s in args.strategies] + [SKRPromptGate(chat)]
        reports = []
        for gate in gates:
            label = getattr(gate, "strategy", gate.name)
            report = evaluate_live(gate, records, retriever, answerer, batch_size=args.batch_size)
            report["gate"] = label if label == gate.name else f"{gate.name}:{label}"
            report["draft_reuse"] = draft_savings(report, plain)
            reports.append(report)
            results["datasets"][dataset] = [{k: v for k, v in r.items() if k != "questions"} for r in reports]
            write_results("verbalized_strategies", "(partial)", results)
        plot_reports(
            reports,
            RESULTS / f"verbalized_strategies_{dataset}.png",
            title=f"verbalized strategies, SmolLM2-135M, {dataset} (n={len(records)})",
        )
        rows = [
            [
                r["gate"],
                *(
                    r["alignment"][k]
                    for k in ("uncertain_rate", "accuracy", "overconfidence", "conservativeness", "alignment")
                ),
                round(r["retrieval_calls"] * r["n"]),
                r["at_threshold"]["accuracy"],
                r["gap_capture"],
                r["fallbacks"],
                r["seconds_per_question"]["gate"],
                None if r["draft_reuse"] is None else r["draft_reuse"]["direct_answer_s_median"],
            ]
            for r in reports
        ]
        base = reports[0]
        sections.append(
            f"## {dataset} (n={base['n']}; never {base['never']:.3f}, always {base['always']:.3f}, "
            f"oracle {base['oracle']:.3f})\n\n"
            + markdown_table(
                [
                    "gate",
                    "uncertain rate",
                    "accuracy",
                    "overconfidence",
                    "conservativeness",
                    "alignment",
                    "retrieval calls",
                    "accuracy at decisions",
                    "gap capture",
                    "fallbacks",
                    "gate s/q",
                    "draft saves s",
                ],
                rows,
            )
        )
    markdown = (
        "# Verbalized confidence (When-to-Retrieve Table 3) with SmolLM2-135M-Instruct\n\n"
        "Greedy decoding; accuracy = contains-answer of the answer without retrieval; "
        "retrieval = BM25 top-3 over the shared Wikipedia paragraphs.\n\n" + "\n\n".join(sections)
    )
    md, _ = write_results("verbalized_strategies", markdown, results)
    print(markdown)
    print(f"\nwrote {md}")


if __name__ == "__main__":
    main()
