"""SeaKR live on HotpotQA dev: BM25 over the shared Wikipedia paragraphs, SmolLM2 answering.

Questions. ``hotpotqa_dev_qa_only.jsonl`` holds questions and answers only. The corpus's
``source == "adarague-hotpotqa"`` paragraphs are the 10 HotpotQA context paragraphs of
the 500 AdaRAGUE HotpotQA questions (``adarague/hotpotqa.train.jsonl``), which are
HotpotQA dev questions. Rule: walk HotpotQA dev in file order and keep a question when
its text (whitespace collapsed) is an AdaRAGUE HotpotQA question whose two supporting paragraphs
(``is_supporting``) are in the corpus with the same title and text; the first ``--n``
(100) kept form the set. ``--limit N`` runs only the first N of them. Those two corpus
paragraphs are the question's gold paragraphs.

Variants (same prompt, same LM, the whole 30k-paragraph corpus):

- ``no-retrieval``: the chain of thought alone;
- ``single-retrieval``: BM25 top-3 for the question in context, one chain of thought;
- ``seakr``: the full pipeline (gate, FLARE query, re-ranking, reasoning selection);
- ``seakr-no-rerank``: BM25's first snippet instead of the lowest-U one;
- ``seakr-no-select``: the answer the reasoning loop reached (forced with "So the answer
  is" when it did not), without choosing between routes. The loop is the full run's
  (deterministic, same seeds), so this variant reuses those traces and only adds the
  forced answers.

Reported per variant: EM, F1, retrieval calls, seconds per question. For ``seakr`` also:

- re-ranking, over its re-rankings of >= 2 candidates: how often the lowest-U snippet is
  a gold paragraph, how often BM25's first candidate is, the mean gold share of the
  candidates (what a random pick would get), how often the two picks agree, and the
  gate's retrieval rate per step;
- U as a gate (SPEC §6): need score = U of the question's first gate decision (undefined
  U ranks above every defined one: SeaKR retrieves then), a = EM without retrieval
  (``no-retrieval``), b = EM with one retrieval (``single-retrieval``); gap capture,
  decision AUROC, the 95% band of the gap capture of random scores, and the gate's own
  first decisions at δ. EM, not F1, so that a and b are the 0/1 outcomes of §6. Few
  questions make these noisy: read them with their n and band.

Every variant appends one JSON line per question to
``benchmarks/results/seakr_hotpotqa/k<samples>_threshold<δ>/<variant>.jsonl`` as it
goes; a rerun with the same settings resumes. The summary, computed from those rows, is
written to ``benchmarks/results/seakr_hotpotqa.{md,json}`` (``_limit<N>`` with
``--limit``). ``--summary-only`` recomputes it from the rows already there (of a partial
run too) without loading any model.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/seakr_hotpotqa.py \\
        [--data DIR] [--n 100] [--limit N] [--samples 20] [--threshold T] [--variants ...] \\
        [--summary-only]
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from _common import RESULTS, add_data_argument, hotpotqa_contexts, markdown_table, write_results
from adaptive_gates.evaluation import evaluate_scores, null_gap_captures
from adaptive_gates.records.answer_metrics import exact_match, token_f1
from adaptive_gates.records.data import QARecord, iter_jsonl, load_corpus, load_qa, write_jsonl
from adaptive_gates.seakr.pipeline import SeaKRPipeline
from adaptive_gates.seakr.runner import run_pipeline, summarize

VARIANTS = ("no-retrieval", "single-retrieval", "seakr", "seakr-no-rerank", "seakr-no-select")
_OPTIONS = {
    "no-retrieval": {"mode": "no-retrieval"},
    "single-retrieval": {"mode": "single-retrieval"},
    "seakr": {},
    "seakr-no-rerank": {"rerank": False},
}
#: δ of the recorded run (``results/seakr_hotpotqa.*``), for SmolLM2-135M with k = 20.
#: Set by hand before that run from U of the first steps of 10 HotpotQA dev questions
#: (0.7–4.5, median 3.85), to retrieve at most first steps; on the 100 questions it
#: retrieved at 0.640 of the first steps and 0.517 of all 232 steps
#: (``results/seakr_hotpotqa.md``).
#: Another model or k needs its own δ (``SeaKRPipeline.calibrate``).
RECORDED_THRESHOLD = 3.5
_NULL_SEED = 0  # seed of the random need scores behind the gap capture's noise band

Gold = dict[str, frozenset[str]]  # question id -> corpus ids of its gold paragraphs


def checkpoint_dir(samples: int, threshold: float) -> Path:
    """Per-question rows of one setting (rows of another setting must not be reused)."""
    return RESULTS / "seakr_hotpotqa" / f"k{samples}_threshold{threshold:g}"


def select_questions(data: Path, n: int) -> tuple[list[QARecord], Gold]:
    """The first ``n`` HotpotQA dev questions whose supporting paragraphs are in the corpus
    (the rule of the module docstring), and the corpus ids of those paragraphs."""
    supporting = supporting_paragraphs(data)
    records = [r for r in load_qa(data / "hotpotqa_dev_qa_only.jsonl") if _spaces(r.question) in supporting][:n]
    return records, {r.id: supporting[_spaces(r.question)] for r in records}


def supporting_paragraphs(data: Path) -> dict[str, frozenset[str]]:
    """Corpus ids of the supporting paragraphs of every AdaRAGUE HotpotQA question whose
    supporting paragraphs are all in the corpus, keyed by the question with its
    whitespace collapsed."""
    contexts = hotpotqa_contexts(data, load_corpus(data / "wiki_paragraph_corpus.jsonl"))
    return {_spaces(c.question): frozenset(r.id for r in c.supporting) for c in contexts}


def _spaces(text: str) -> str:
    """Whitespace collapsed: 31 AdaRAGUE questions differ from dev's only in spacing."""
    return " ".join(text.split())


def stored_rows(checkpoint: Path) -> dict[str, dict[str, Any]]:
    """The rows already in a variant's checkpoint, by question id (none without a file)."""
    return {row["id"]: row for _, row in iter_jsonl(checkpoint)} if checkpoint.is_file() else {}


def no_select_rows(
    records: list[QARecord], seakr_rows: list[dict[str, Any]], pipeline: SeaKRPipeline, checkpoint: Path
) -> list[dict[str, Any]]:
    """``seakr-no-select`` from the full run's loops: the loop's answer, else a forced one."""
    done = stored_rows(checkpoint)
    rows = []
    for record, full in zip(records, seakr_rows):
        if record.id not in done:
            trace = full["trace"]
            start = time.perf_counter()
            if trace is None:  # the full run failed on this question: so does this variant
                answer, error = "", full["error"]
            else:
                steps = [s["text"] for s in trace["steps"] if s["text"]]
                answer = pipeline.unselected_answer(record.question, steps, trace["loop_answer"])
                error = None
            loop_seconds = trace["seconds"] if trace else 0.0
            done[record.id] = {
                "id": record.id,
                "prediction": answer,
                "em": exact_match(answer, record.answers),
                "f1": token_f1(answer, record.answers),
                "retrieval_calls": full["retrieval_calls"],
                # An upper bound: the full run's time includes its route selection.
                "seconds": loop_seconds + time.perf_counter() - start,
                "error": error,
            }
            write_jsonl(checkpoint, [done[record.id]], append=True)
        rows.append(done[record.id])
    return rows


def run_variants(args: argparse.Namespace, records: list[QARecord], checkpoints: Path) -> dict[str, dict[str, Any]]:
    """Run (or resume) every requested variant on ``records``; its report by variant."""
    from adaptive_gates.models.defaults import default_llm
    from adaptive_gates.retrieval import BM25Retriever
    from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty

    print(f"{len(records)} questions; indexing the corpus")
    retriever = BM25Retriever.from_jsonl(args.data / "wiki_paragraph_corpus.jsonl")
    lm = default_llm()
    uncertainty = SelfAwareUncertainty(lm, k=args.samples)
    checkpoints.mkdir(parents=True, exist_ok=True)
    reports: dict[str, dict[str, Any]] = {}
    for variant in args.variants:
        if variant == "seakr-no-select":
            continue
        reports[variant] = run_pipeline(
            records,
            retriever,
            lm=lm,
            uncertainty=uncertainty,
            threshold=args.threshold,
            checkpoint=checkpoints / f"{variant}.jsonl",
            **_OPTIONS[variant],
        )
    if "seakr-no-select" in args.variants:
        if "seakr" not in reports:
            raise SystemExit("seakr-no-select reuses the seakr run: include the seakr variant")
        pipeline = SeaKRPipeline(retriever, lm, uncertainty=uncertainty, threshold=args.threshold)
        rows = no_select_rows(records, reports["seakr"]["results"], pipeline, checkpoints / "seakr-no-select.jsonl")
        reports["seakr-no-select"] = {**summarize(rows), "results": rows}
    return reports


def stored_reports(variants: Sequence[str], records: list[QARecord], checkpoints: Path) -> dict[str, dict[str, Any]]:
    """The report of every variant with rows on disk, over the ``records`` it has rows for."""
    reports = {}
    for variant in variants:
        done = stored_rows(checkpoints / f"{variant}.jsonl")
        rows = [done[r.id] for r in records if r.id in done]
        if rows:
            reports[variant] = {**summarize(rows), "results": rows}
    return reports


def _rate(count: float, total: int) -> float | None:
    """``count / total``; ``None`` when there is nothing to count."""
    return count / total if total else None


def rerank_agreement(rows: list[dict[str, Any]], gold: Gold) -> dict[str, Any]:
    """Over re-rankings of >= 2 candidates: how often the lowest-U snippet is BM25's first,
    how often it and BM25's first are gold, the mean gold share of the candidates (a
    random pick's rate); and the share of steps whose gate fired."""
    steps = [(gold[r["id"]], s) for r in rows if r["trace"] for s in r["trace"]["steps"]]
    ranked = [(g, s) for g, s in steps if s["chosen"] is not None and len(s["candidates"]) >= 2]
    same = sum(s["chosen"] == s["candidates"][0]["id"] for _, s in ranked)
    chosen_gold = sum(s["chosen"] in g for g, s in ranked)
    first_gold = sum(s["candidates"][0]["id"] in g for g, s in ranked)
    gold_share = sum(sum(c["id"] in g for c in s["candidates"]) / len(s["candidates"]) for g, s in ranked)
    fired = sum(s["retrieve"] for _, s in steps)
    return {
        "rerankings": len(ranked),
        "same_as_bm25_first": same,
        "share_same": _rate(same, len(ranked)),
        "chosen_gold": chosen_gold,
        "share_chosen_gold": _rate(chosen_gold, len(ranked)),
        "bm25_first_gold": first_gold,
        "share_bm25_first_gold": _rate(first_gold, len(ranked)),
        "mean_gold_share_of_candidates": _rate(gold_share, len(ranked)),
        "rerankings_with_a_gold_candidate": sum(any(c["id"] in g for c in s["candidates"]) for g, s in ranked),
        "steps": len(steps),
        "gate_retrieval_rate": _rate(fired, len(steps)),
    }


def first_gate_report(reports: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """SPEC §6 for U of each question's first gate decision in ``seakr`` as the need score,
    on the questions with rows in ``no-retrieval`` (a: EM), ``single-retrieval`` (b: EM)
    and ``seakr`` (a trace); ``None`` without those variants or such questions."""
    if not {"no-retrieval", "single-retrieval", "seakr"} <= reports.keys():
        return None
    without = {r["id"]: r["em"] for r in reports["no-retrieval"]["results"]}
    with_one = {r["id"]: r["em"] for r in reports["single-retrieval"]["results"]}
    seakr_rows = reports["seakr"]["results"]
    rows = [r for r in seakr_rows if r["trace"] and r["id"] in without and r["id"] in with_one]
    if not rows:
        return None
    first = [r["trace"]["steps"][0] for r in rows]
    defined = [s["uncertainty"] for s in first if s["uncertainty"] is not None]
    undefined = max(defined, default=0.0) + 1.0  # no usable sample: SeaKR retrieves
    scores = np.array([undefined if s["uncertainty"] is None else s["uncertainty"] for s in first])
    a = np.array([without[r["id"]] for r in rows])
    b = np.array([with_one[r["id"]] for r in rows])
    report = evaluate_scores(
        scores, a, b, gate="seakr-U", metric="em", retrieve=np.array([s["retrieve"] for s in first])
    )
    band = None
    if report["gap_capture"] is not None:
        nulls = null_gap_captures(a, b, np.random.default_rng(_NULL_SEED))
        band = [float(q) for q in np.percentile(nulls, [2.5, 97.5])]
    return {
        **{k: v for k, v in report.items() if not k.endswith("curve")},
        "null_gap_capture_95": band,
        "helps": int((b > a).sum()),
        "hurts": int((b < a).sum()),
        "undefined_u": len(first) - len(defined),
        "skipped": len(seakr_rows) - len(rows),
    }


def summary(
    reports: dict[str, dict[str, Any]], records: list[QARecord], gold: Gold, args: argparse.Namespace
) -> tuple[str, dict[str, Any]]:
    """The summary as markdown (also printed) and as JSON data; questions by id only."""
    table = {
        v: {k: r[k] for k in ("n", "em", "f1", "retrieval_calls", "errors", "seconds_per_question")}
        for v, r in reports.items()
    }
    data: dict[str, Any] = {
        "questions": [r.id for r in records],
        "samples": args.samples,
        "threshold": args.threshold,
        "variants": table,
    }
    header = ["variant", "n", "EM", "F1", "retrieval calls", "errors", "s / question"]
    parts = [markdown_table(header, [[v, *t.values()] for v, t in table.items()])]
    if "seakr" in reports:
        data["seakr_rerank"] = rerank = rerank_agreement(reports["seakr"]["results"], gold)
        parts.append(_rerank_markdown(rerank))
    gate = first_gate_report(reports)
    if gate is not None:
        data["seakr_gate"] = gate
        parts.append(_gate_markdown(gate))
    return "\n\n".join(parts), data


def _rerank_markdown(rerank: dict[str, Any]) -> str:
    header = [
        "re-rankings",
        "lowest-U is gold",
        "BM25's first is gold",
        "gold share of candidates",
        "lowest-U is BM25's first",
        "steps",
        "gate retrieval rate",
    ]
    row = [
        rerank["rerankings"],
        rerank["share_chosen_gold"],
        rerank["share_bm25_first_gold"],
        rerank["mean_gold_share_of_candidates"],
        rerank["share_same"],
        rerank["steps"],
        rerank["gate_retrieval_rate"],
    ]
    return (
        "Re-ranking (seakr), over re-rankings of >= 2 candidates; gold = HotpotQA supporting "
        "paragraph:\n\n" + markdown_table(header, [row])
    )


def _gate_markdown(gate: dict[str, Any]) -> str:
    band = gate["null_gap_capture_95"]
    header = [
        "n",
        "never",
        "always",
        "oracle",
        "helps / hurts",
        "gap capture",
        "random 95% band",
        "decision AUROC",
        "retrieval rate at δ",
        "accuracy at δ",
    ]
    row = [
        gate["n"],
        gate["never"],
        gate["always"],
        gate["oracle"],
        f"{gate['helps']} / {gate['hurts']}",
        gate["gap_capture"],
        None if band is None else f"{band[0]:.3f} to {band[1]:.3f}",
        gate["decision_auroc"],
        gate["at_threshold"]["retrieval_rate"],
        gate["at_threshold"]["accuracy"],
    ]
    return (
        f"U of the first gate decision as a gate (seakr; a = EM of no-retrieval, b = EM of "
        f"single-retrieval; {gate['undefined_u']} undefined U ranked first; {gate['skipped']} seakr "
        f"rows skipped, without a trace or a baseline row):\n\n" + markdown_table(header, [row])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--n", type=int, default=100, help="questions in the set (default 100)")
    parser.add_argument("--limit", type=int, help="run only the first N questions of the set")
    parser.add_argument("--samples", type=int, default=20, help="k samples per uncertainty estimate")
    parser.add_argument(
        "--threshold",
        type=float,
        default=RECORDED_THRESHOLD,
        help=f"the gate's δ (default {RECORDED_THRESHOLD}: the recorded run's, for SmolLM2 at k=20)",
    )
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument(
        "--summary-only", action="store_true", help="recompute the summary from the rows on disk; run no model"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    records, gold = select_questions(args.data, args.n)
    records = records[: args.limit]
    checkpoints = checkpoint_dir(args.samples, args.threshold)
    if args.summary_only:
        reports = stored_reports(args.variants, records, checkpoints)
    else:
        reports = run_variants(args, records, checkpoints)
    markdown, data = summary(reports, records, gold, args)
    name = "seakr_hotpotqa" if args.limit is None else f"seakr_hotpotqa_limit{args.limit}"
    md, js = write_results(name, markdown, data)
    print(markdown)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
