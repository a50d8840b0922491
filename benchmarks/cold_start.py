"""The draft-check gate's cold start, measured offline: no fitted weights, only what the
model says about itself (an empty or hedged draft, an abstention; with a self-report,
its stated certainty).

1. On the 3,000 bundled Llama-3.1-8B outcomes (six AdaRAGUE tasks). Their drafts were
   asked plainly, so they hold no certainty: only an abstention speaks. Beside it, the
   fitted draft-check's cross-fitted figure on the same records (one gate on all six
   tasks, 5 folds, seed 0: ``results/adarague_gates.json``, pooled), which is what the
   shipped gate is expected near on Llama's own answers.
2. With ``--smol DIR``: the embedded SmolLM2's outcomes ``DIR/out_{hotpotqa,nq,trivia}.jsonl``,
   both answers asked with the self-report instruction (each is read with
   ``read_self_report``: the answer without its marker, and the certainty stated with
   the answer without retrieval). There: the cold start (abstention and certainty),
   each of its two parts alone, and the Llama-fitted draft-check (the shipped settings,
   BM25 over ``--corpus``, the corpus it was fitted with; the embedded MiniLM): the
   transfer Llama -> SmolLM2. The questions there are AdaRAGUE's, which the shipped gate
   was fitted on (with Llama's labels), so beside the shipped gate is the same recipe
   fitted on Llama's outcomes of the other five tasks, which never saw those questions.
   A file still being written is read up to its last whole line.

The cold start's score has few values, so most questions tie. Gap capture here is
reported twice: tie-aware (a tie at its expected gain, as ``evaluation.curves`` counts
it), and as the mean and spread over ``--seeds`` random orders within ties.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cold_start.py [--smol DIR] [--seeds 10] [--corpus PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _common import DEFAULT_DATA, RESULTS, markdown_table, write_results
from adaptive_gates import CachedEmbedder, DraftCheckGate, pretrained
from adaptive_gates.answering.self_report import CERTAINTY_FIELD, read_self_report, recorded_certainty
from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, adarague_outcomes
from adaptive_gates.evaluation import gap_capture, gate_curve, null_gap_captures, oracle_curve, random_auc
from adaptive_gates.gates.draft_check.cold_start import CERTAIN_SCORE, UNCERTAIN_SCORE, UNSTATED_SCORE
from adaptive_gates.models import default_embedder
from adaptive_gates.records.answer_metrics import normalize_answer
from adaptive_gates.records.data import OutcomeRecord
from adaptive_gates.records.selfknowledge import outcome_scores
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.signals.certainty import CERTAIN, UNCERTAIN
from adaptive_gates.signals.draft import hedge

SMOL_TASKS = ("hotpotqa", "nq", "trivia")
METRIC = "contains"


def capture(scores: np.ndarray, a: np.ndarray, b: np.ndarray) -> float | None:
    """Oracle-gap capture, ties at their expected gain."""
    return gap_capture(gate_curve(scores, a, b).auc, random_auc(a, b), oracle_curve(a, b).auc)


def tie_broken(scores: np.ndarray, a: np.ndarray, b: np.ndarray, seeds: int) -> dict[str, Any]:
    """Gap capture with ties broken in a random order, over ``seeds`` orders."""
    values = []
    for seed in range(seeds):
        order = np.lexsort((np.random.default_rng(seed).random(len(scores)), -scores))
        ranked = np.empty(len(scores))
        ranked[order] = -np.arange(len(scores), dtype=np.float64)  # strictly decreasing: no tie left
        values.append(capture(ranked, a, b))
    known = [v for v in values if v is not None]
    if not known:
        return {"mean": None, "sd": None, "min": None, "max": None}
    return {"mean": float(np.mean(known)), "sd": float(np.std(known)), "min": min(known), "max": max(known)}


def abstained(record: OutcomeRecord) -> bool:
    """The draft is empty or a hedge."""
    return not normalize_answer(record.pred_no_retrieval) or hedge(record.pred_no_retrieval) is not None


def certainty_only(records: list[OutcomeRecord]) -> np.ndarray:
    """The cold start's certainty scores alone (an abstention counts as no statement)."""
    table = {UNCERTAIN: UNCERTAIN_SCORE, CERTAIN: CERTAIN_SCORE, None: UNSTATED_SCORE}
    return np.array([table[recorded_certainty(r)] for r in records], dtype=np.float64)


def measured(scores: np.ndarray, a: np.ndarray, b: np.ndarray, seeds: int) -> dict[str, Any]:
    return {"tie_aware": capture(scores, a, b), "tie_broken": tie_broken(scores, a, b, seeds)}


def read_smol(path: Path) -> list[OutcomeRecord]:
    """SmolLM2 outcome records whose two answers are self-report replies: each read
    into its answer, and the certainty stated without retrieval kept; a last line cut
    short by a collection still running is left out."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line being written
        without, with_ = read_self_report(row["pred_no_retrieval"]), read_self_report(row["pred_one_retrieval"])
        records.append(
            OutcomeRecord(
                id=str(row["id"]),
                question=row["question"],
                answers=list(row["answers"]),
                pred_no_retrieval=without.answer,
                pred_one_retrieval=with_.answer,
                extra={"llm": row.get("llm", "SmolLM2-135M-Instruct"), CERTAINTY_FIELD: without.certainty},
            )
        )
    return records


def outcomes(records: list[OutcomeRecord]) -> tuple[np.ndarray, np.ndarray]:
    return outcome_scores(records, METRIC)


def llama_part(seeds: int) -> dict[str, Any]:
    cold = DraftCheckGate(cold_start=True)  # offline the cold start asks nothing and retrieves nothing
    fitted = json.loads((RESULTS / "adarague_gates.json").read_text())["settings"]["pooled"]["draft-check"]
    rows: dict[str, Any] = {}
    pooled: list[OutcomeRecord] = []
    for task in ADARAGUE_TASKS:
        records = adarague_outcomes(task)
        pooled += records
        a, b = outcomes(records)
        rows[task] = {
            "n": len(records),
            "abstentions": sum(map(abstained, records)),
            "cold_start": measured(cold.score_records(records), a, b, seeds),
            "fitted_cross_fitted": fitted[task]["gap_capture"],
        }
    a, b = outcomes(pooled)
    rows["all"] = {
        "n": len(pooled),
        "abstentions": sum(map(abstained, pooled)),
        "cold_start": measured(cold.score_records(pooled), a, b, seeds),
        "fitted_cross_fitted": fitted["all"]["gap_capture"],
    }
    return rows


def smol_part(directory: Path, corpus: Path, seeds: int) -> dict[str, Any]:
    found = {
        task: read_smol(directory / f"out_{task}.jsonl")
        for task in SMOL_TASKS
        if (directory / f"out_{task}.jsonl").is_file()
    }
    found = {task: records for task, records in found.items() if records}
    if not found:
        return {}
    cold = DraftCheckGate(cold_start=True)
    abstention_only = DraftCheckGate(cold_start=True, self_report=False)
    retriever, embedder = BM25Retriever.from_jsonl(corpus), CachedEmbedder(default_embedder())
    shipped = pretrained("draft-check", retriever=retriever, embedder=embedder, keep_fit=True)
    rows: dict[str, Any] = {}
    for task, records in found.items():
        elsewhere = DraftCheckGate(retriever=retriever, embedder=embedder, self_report=False, agreement="always")
        elsewhere.fit_outcomes([r for t in ADARAGUE_TASKS if t != task for r in adarague_outcomes(t)])
        gates: dict[str, Callable[[list[OutcomeRecord]], np.ndarray]] = {
            "cold start": cold.score_records,
            "abstention only": abstention_only.score_records,
            "stated certainty only": certainty_only,
            "shipped Llama-fitted draft-check (fitted on these questions)": shipped.score_records,
            "Llama-fitted draft-check, other five tasks": elsewhere.score_records,
        }
        a, b = outcomes(records)
        null = null_gap_captures(a, b, np.random.default_rng(0))
        stated = [recorded_certainty(r) for r in records]
        rows[task] = {
            "n": len(records),
            "abstentions": sum(map(abstained, records)),
            "stated_uncertain": stated.count(UNCERTAIN),
            "stated_certain": stated.count(CERTAIN),
            "never": float(a.mean()),
            "always": float(b.mean()),
            "oracle": float(np.maximum(a, b).mean()),
            "random_band": [float(np.percentile(null, 2.5)), float(np.percentile(null, 97.5))] if null.size else None,
            "gates": {name: measured(score(records), a, b, seeds) for name, score in gates.items()},
        }
    return rows


def _figure(entry: dict[str, Any]) -> str:
    broken = entry["tie_broken"]
    if broken["mean"] is None:
        return "n/a"
    aware = "n/a" if entry["tie_aware"] is None else f"{entry['tie_aware']:.3f}"
    return f"{aware} ({broken['mean']:.3f} ± {broken['sd']:.3f})"


def report(llama: dict[str, Any], smol: dict[str, Any], seeds: int, smol_dir: Path | None) -> str:
    lines = [
        "# The draft-check gate's cold start, offline",
        "",
        "Gap capture of the oracle gap (0 = random, 1 = oracle), metric `contains`; each cold-start figure is "
        f"tie-aware (a tie at its expected gain), then in brackets the mean ± sd over {seeds} random orders "
        "within ties. The tie-aware figure is the exact expectation over those orders; one random order of "
        "500 questions moves it by about ±0.06, so a mean of 10 is itself uncertain by about ±0.02. "
        "`benchmarks/cold_start.py`.",
        "",
        "## Llama-3.1-8B's bundled outcomes (abstention only: no certainty was asked for)",
        "",
        markdown_table(
            ["task", "n", "abstentions", "cold start", "fitted draft-check (cross-fitted)"],
            [
                [task, r["n"], r["abstentions"], _figure(r["cold_start"]), r["fitted_cross_fitted"]]
                for task, r in llama.items()
            ],
        ),
        "",
        "The fitted figure is the draft-check gate fitted on the other folds of all six tasks (5 folds, seed 0; "
        "`results/adarague_gates.md`, pooled): what the shipped gate, fitted on all 3,000, is expected near on "
        "Llama's own answers. Llama abstains on 26 of 3,000 questions, so its cold start has little to go on.",
    ]
    if smol:
        header = ["task", "n", "abstentions", "uncertain", "certain", "never", "always", "oracle", "random band"]
        counts = ["n", "abstentions", "stated_uncertain", "stated_certain", "never", "always", "oracle", "band"]
        for r in smol.values():
            band = r["random_band"]
            r["band"] = "n/a" if band is None else f"{band[0]:.3f} .. {band[1]:.3f}"
        names = list(next(iter(smol.values()))["gates"])
        figures = [[name, *(_figure(r["gates"][name]) for r in smol.values())] for name in names]
        lines += [
            "",
            f"## SmolLM2-135M's outcomes, self-report drafts ({smol_dir})",
            "",
            markdown_table(header, [[t, *(r[k] for k in counts)] for t, r in smol.items()]),
            "",
            markdown_table(["gate", *smol], figures),
            "",
            "The Llama-fitted draft-check scores SmolLM2's drafts (the answers without their certainty marker) "
            "with BM25 over the corpus it was fitted with: the transfer from one model to another, which the cold "
            "start is meant to replace. These are AdaRAGUE's questions: the shipped gate was fitted on them (with "
            "Llama's labels: a question hard for one model is often hard for another), and the corpus holds "
            "HotpotQA's own paragraphs, so its figures here are optimistic; the gate fitted on the other five "
            "tasks never saw the task's questions. Random band: where 95% of 1,000 random gates land.",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smol", type=Path, help="folder of SmolLM2's self-report outcomes (out_<task>.jsonl)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_DATA / "wiki_paragraph_corpus.jsonl")
    parser.add_argument("--seeds", type=int, default=10, help="random tie-break orders (default 10)")
    args = parser.parse_args()
    start = time.perf_counter()
    llama = llama_part(args.seeds)
    smol = smol_part(args.smol, args.corpus, args.seeds) if args.smol else {}
    data = {
        "metric": METRIC,
        "seeds": args.seeds,
        "llama": llama,
        "smol": smol,
        "smol_dir": str(args.smol) if args.smol else None,
        "seconds": round(time.perf_counter() - start, 1),
    }
    md, js = write_results("cold_start", report(llama, smol, args.seeds, args.smol), data)
    print(md.read_text())
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
