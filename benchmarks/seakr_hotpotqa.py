"""SeaKR live on HotpotQA dev: BM25 over the shared Wikipedia paragraphs, SmolLM2 answering.

Questions. ``hotpotqa_dev_qa_only.jsonl`` holds questions and answers only. The corpus's
``source == "adarague-hotpotqa"`` paragraphs are the 10 HotpotQA context paragraphs of
the 500 AdaRAGUE HotpotQA questions (``adarague/hotpotqa.train.jsonl``), which are
HotpotQA dev questions. Rule: walk HotpotQA dev in file order and keep a question when
its text (whitespace collapsed) is an AdaRAGUE HotpotQA question whose two supporting paragraphs
(``is_supporting``) are in the corpus with the same title and text; the first ``--n``
(100) kept form the set. ``--limit N`` runs only the first N of them.

Variants (same prompt, same LM, the whole 30k-paragraph corpus):

- ``no-retrieval``: the chain of thought alone;
- ``single-retrieval``: BM25 top-3 for the question in context, one chain of thought;
- ``seakr``: the full pipeline (gate, FLARE query, re-ranking, reasoning selection);
- ``seakr-no-rerank``: BM25's first snippet instead of the lowest-U one;
- ``seakr-no-select``: the answer the reasoning loop reached (forced with "So the answer
  is" when it did not), without choosing between routes. The loop is the full run's
  (deterministic, same seeds), so this variant reuses those traces and only adds the
  forced answers.

Reported per variant: EM, F1, retrieval calls, seconds per question; for ``seakr``
also how often the re-ranker's first choice equals BM25's first and the gate's
retrieval rate per step.

Every variant appends one JSON line per question to
``benchmarks/results/seakr_hotpotqa/k<samples>_threshold<δ>/<variant>.jsonl`` as it
goes; a rerun with the same settings resumes. The
summary is written to ``benchmarks/results/seakr_hotpotqa.{md,json}``.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/seakr_hotpotqa.py \\
        [--data DIR] [--n 100] [--limit N] [--samples 20] [--threshold T] [--variants ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, add_data_argument, markdown_table, write_results
from adaptive_gates.data import QARecord, iter_jsonl, load_corpus, load_qa, write_jsonl
from adaptive_gates.metrics import exact_match, token_f1
from adaptive_gates.models.defaults import default_llm
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.seakr_pipeline import DEFAULT_THRESHOLD, SeaKRPipeline, run_pipeline, summarize

VARIANTS = ("no-retrieval", "single-retrieval", "seakr", "seakr-no-rerank", "seakr-no-select")
_OPTIONS = {
    "no-retrieval": {"mode": "no-retrieval"},
    "single-retrieval": {"mode": "single-retrieval"},
    "seakr": {},
    "seakr-no-rerank": {"rerank": False},
}


def checkpoint_dir(samples: int, threshold: float) -> Path:
    """Per-question rows of one setting (rows of another setting must not be reused)."""
    return RESULTS / "seakr_hotpotqa" / f"k{samples}_threshold{threshold:g}"


def select_questions(data: Path, n: int) -> list[QARecord]:
    """The first ``n`` HotpotQA dev questions whose supporting paragraphs are in the corpus
    (the rule of the module docstring)."""
    corpus = {(r.title, r.text) for r in load_corpus(data / "wiki_paragraph_corpus.jsonl")}
    covered = {
        _spaces(obj["question"])
        for _, obj in iter_jsonl(data / "adarague" / "hotpotqa.train.jsonl")
        if all((c["title"], c["text"]) in corpus for c in obj["context"] if c["is_supporting"])
    }
    return [r for r in load_qa(data / "hotpotqa_dev_qa_only.jsonl") if _spaces(r.question) in covered][:n]


def _spaces(text: str) -> str:
    """Whitespace collapsed: 31 AdaRAGUE questions differ from dev's only in spacing."""
    return " ".join(text.split())


def no_select_rows(records: list[QARecord], seakr_rows: list[dict[str, Any]],
                   pipeline: SeaKRPipeline, checkpoint: Path) -> list[dict[str, Any]]:
    """``seakr-no-select`` from the full run's loops: the loop's answer, else a forced one."""
    done = {row["id"]: row for _, row in iter_jsonl(checkpoint)} if checkpoint.is_file() else {}
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
                "id": record.id, "prediction": answer, "em": exact_match(answer, record.answers),
                "f1": token_f1(answer, record.answers), "retrieval_calls": full["retrieval_calls"],
                # An upper bound: the full run's time includes its route selection.
                "seconds": loop_seconds + time.perf_counter() - start, "error": error,
            }
            write_jsonl(checkpoint, [done[record.id]], append=True)
        rows.append(done[record.id])
    return rows


def rerank_agreement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the lowest-U snippet is BM25's first, over re-rankings of >= 2 candidates;
    and the share of steps whose gate fired."""
    steps = [s for r in rows if r["trace"] for s in r["trace"]["steps"]]
    ranked = [s for s in steps if s["chosen"] is not None and len(s["candidates"]) >= 2]
    same = sum(s["chosen"] == s["candidates"][0]["id"] for s in ranked)
    fired = sum(s["retrieve"] for s in steps)
    return {
        "rerankings": len(ranked),
        "same_as_bm25_first": same,
        "share_same": same / len(ranked) if ranked else None,
        "steps": len(steps),
        "gate_retrieval_rate": fired / len(steps) if steps else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--n", type=int, default=100, help="questions in the set (default 100)")
    parser.add_argument("--limit", type=int, help="run only the first N questions of the set")
    parser.add_argument("--samples", type=int, default=20, help="k samples per uncertainty estimate")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="the gate's δ")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from adaptive_gates.uncertainty import SelfAwareUncertainty

    records = select_questions(args.data, args.n)[: args.limit]
    print(f"{len(records)} questions; indexing the corpus")
    retriever = BM25Retriever.from_jsonl(args.data / "wiki_paragraph_corpus.jsonl")
    lm = default_llm()
    uncertainty = SelfAwareUncertainty(lm, k=args.samples)
    checkpoints = checkpoint_dir(args.samples, args.threshold)
    checkpoints.mkdir(parents=True, exist_ok=True)
    reports: dict[str, dict[str, Any]] = {}
    for variant in args.variants:
        if variant == "seakr-no-select":
            continue
        reports[variant] = run_pipeline(
            records, retriever, lm=lm, uncertainty=uncertainty, threshold=args.threshold,
            checkpoint=checkpoints / f"{variant}.jsonl", **_OPTIONS[variant],
        )
    if "seakr-no-select" in args.variants:
        if "seakr" not in reports:
            raise SystemExit("seakr-no-select reuses the seakr run: include the seakr variant")
        pipeline = SeaKRPipeline(retriever, lm, uncertainty=uncertainty, threshold=args.threshold)
        rows = no_select_rows(records, reports["seakr"]["results"], pipeline,
                              checkpoints / "seakr-no-select.jsonl")
        reports["seakr-no-select"] = {**summarize(rows), "results": rows}

    table = {v: {k: r[k] for k in ("n", "em", "f1", "retrieval_calls", "errors", "seconds_per_question")}
             for v, r in reports.items()}
    data = {"questions": [r.id for r in records], "samples": args.samples, "threshold": args.threshold,
            "variants": table}
    if "seakr" in reports:
        data["seakr_rerank"] = rerank_agreement(reports["seakr"]["results"])
    header = ["variant", "n", "EM", "F1", "retrieval calls", "errors", "s / question"]
    markdown = markdown_table(header, [[v, *t.values()] for v, t in table.items()])
    if "seakr_rerank" in data:
        markdown += "\n\nRe-ranking vs BM25 (seakr): " + json.dumps(data["seakr_rerank"])
    name = "seakr_hotpotqa" if args.limit is None else f"seakr_hotpotqa_limit{args.limit}"
    md, js = write_results(name, markdown, data)
    print(markdown)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
