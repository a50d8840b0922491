"""``adaptive-gates eval``: a gate fitted and judged on recorded outcomes, or live on QA
records (the LLM answering now), reported as JSON, a printed summary and a plot."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .arguments import positive_int, rate
from .backends import corpus_retriever
from .files import input_file, plot_file, report_file, write_report, written_output
from .gate_options import add_gate_arguments, gate_factory, gate_outcomes

if TYPE_CHECKING:
    from ..answering import LLMAnswerer
    from ..gates.base import Gate


def add_parser(sub: Any) -> None:
    ev = sub.add_parser(
        "eval", help="fit a gate on TRAIN outcomes, evaluate it on TEST outcomes (or live on QA records)"
    )
    add_gate_arguments(ev)
    ev.add_argument("--test", required=True, type=input_file, help="outcome records (JSONL) to evaluate on")
    ev.add_argument("--json", required=True, type=report_file, help="where to write the report")
    ev.add_argument(
        "--plot",
        type=plot_file,
        help="where to write the accuracy-vs-retrieval-rate plot (its suffix picks the format: .png, .pdf...)",
    )
    ev.add_argument("--target-rate", type=rate, help="calibrate the threshold for this retrieval rate")
    ev.add_argument(
        "--live",
        action="store_true",
        help="--test holds QA records: the LLM answers them with and without retrieval now",
    )
    ev.add_argument("--k", type=positive_int, default=3, help="with --live: passages per question")
    ev.add_argument("--limit", type=positive_int, help="with --live: only the first N test records")
    ev.add_argument("--batch-size", type=positive_int, default=8, help="with --live: questions per batch")
    ev.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation import evaluate_offline, plot_reports

    if args.live:
        report = _live_report(args)
    else:
        if args.limit is not None:
            raise UsageError("--limit: only with --live")
        if args.train is None:
            raise UsageError("--train is required (outcome records to fit on), unless --live")
        factory = gate_factory(args)
        report = evaluate_offline(
            factory,
            gate_outcomes(args, args.train),
            gate_outcomes(args, args.test),
            metric=args.metric,
            target_rate=args.target_rate,
        )
    write_report("--json", args.json, json.dumps(report, indent=2))
    if args.plot:
        with written_output("--plot", args.plot):
            plot_reports([report], args.plot, title=f"{report['gate']} on {args.test.name}")
    print(_report_line(report))
    if "alignment" in report:
        print(
            "alignment: "
            + " ".join(f"{k}={v:.3f}" for k, v in report["alignment"].items())
            + f" | fallbacks={report['fallbacks']} drafts_reused={report['drafts_reused']}"
        )
    return 0


def _report_line(report: dict[str, Any]) -> str:
    """The printed summary of an ``eval`` report: the curve's figures, then the units
    at the threshold (per question) and where random gates land."""

    def num(value: float | None, digits: int = 3) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    def span(pair: list[float] | None) -> str:
        return "n/a" if pair is None else f"[{pair[0]:.3f}, {pair[1]:.3f}]"

    band = report["random_band"]
    return (
        f"{report['gate']}: n={report['n']} never={report['never']:.3f} always={report['always']:.3f} "
        f"oracle={report['oracle']:.3f} auc={report['auc']:.4f} "
        f"gap_capture={num(report['gap_capture'])} auroc={num(report['decision_auroc'])} "
        f"| at threshold: rate={report['at_threshold']['retrieval_rate']:.3f} "
        f"in_accuracy={report['in_accuracy']:.3f} retrieval_calls={report['retrieval_calls']:.3f}/q "
        f"lm_calls={report['lm_calls']:.3f}/q calls_to_match_always={report['calls_to_match_always']:.3f}/q "
        f"| random {band['level']:.0%}: gap_capture={span(band['gap_capture'])} accuracy={span(band['accuracy'])}"
    )


def _live_report(args: argparse.Namespace) -> dict[str, Any]:
    """Fit (if the gate learns) and calibrate (if asked) on --train, then run live on --test."""
    from ..data import load_outcome_files, load_qa
    from ..evaluation import evaluate_live

    if args.corpus is None:
        raise UsageError("--live needs --corpus (the passages to retrieve from)")
    if args.target_rate is not None and args.train is None:
        raise UsageError("--target-rate with --live calibrates on the questions of --train: give --train")
    gate = gate_factory(args, used_elsewhere=frozenset({"--corpus", "--retriever"}))()
    if not gate.is_fitted and args.train is None:
        raise UsageError(f"gate {args.gate!r} learns from outcome records: give --train")
    # Read every input before the gate is fitted: a bad line should not cost a fit.
    records = load_qa(args.test)[: args.limit]
    # A gate that retrieves to decide answers over its own retrieval: the same one.
    retriever = getattr(gate, "retriever", None) or corpus_retriever(args.retriever or "bm25", args.corpus)
    if not gate.is_fitted:
        gate.fit_outcomes(load_outcome_files(args.train), metric=args.metric)
    if args.target_rate is not None:
        # Only the questions are needed: QA records serve as well as outcome records.
        gate.calibrate([r.question for path in args.train for r in load_qa(path)], args.target_rate)
    answerer = _live_answerer(gate, args.batch_size)
    return evaluate_live(
        gate,
        records,
        retriever,
        answerer,
        k=args.k,
        metric=args.metric,
        target_rate=args.target_rate,
        batch_size=args.batch_size,
    )


def _live_answerer(gate: Gate, batch_size: int) -> LLMAnswerer:
    """The answerer of a live run: the gate's own chat model, asked with the prompts its
    drafts were written with, so a reused draft and an answer with passages differ by
    the passages alone (the log-prob and draft-check gates draft with the package's
    answer prompt, SKR §1.3; the others with the When-to-Retrieve prompts)."""
    from ..answering import LLMAnswerer
    from ..gates.draft_check import DraftCheckGate
    from ..gates.logprob import LogprobGate

    chat = getattr(gate, "chat", None)
    if isinstance(gate, (LogprobGate, DraftCheckGate)):
        return LLMAnswerer(chat, instruction=gate.instruction, max_new_tokens=gate.max_tokens, batch_size=batch_size)
    return LLMAnswerer(chat, style="when-to-retrieve", batch_size=batch_size)
