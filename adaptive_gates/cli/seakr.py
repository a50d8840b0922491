"""``adaptive-gates seakr``: the SeaKR pipeline run live on QA records over a BM25 index
of a corpus, reported as EM/F1 with per-question traces."""

from __future__ import annotations

import argparse
import inspect
import json
from typing import Any

from ..errors import UsageError
from ..records.validation import MAX_NEW_TOKENS, MAX_SAMPLES
from .arguments import max_tokens, positive_int, rate, samples
from .files import bundled_help, data_file, input_file, output_file, report_file, write_report


def add_parser(sub: Any) -> None:
    """The ``seakr`` subcommand: the SeaKR pipeline live on QA records."""
    from ..seakr.pipeline import MODES, RATIONALE_FORMS, SeaKRPipeline
    from ..seakr.reasoning_prompt import DEFAULT_DEMOS
    from ..seakr.uncertainty import SelfAwareUncertainty

    sk = sub.add_parser("seakr", help="answer QA records with SeaKR over a BM25 corpus; report EM/F1 and traces")
    sk.add_argument("--test", required=True, type=data_file, help="QA records (JSONL)" + bundled_help())
    sk.add_argument("--corpus", required=True, type=input_file, help="corpus records (JSONL) to retrieve from")
    sk.add_argument(
        "--json", required=True, type=report_file, help="where to write the report with per-question traces"
    )
    sk.add_argument("--limit", type=positive_int, help="only the first N records")
    sk.add_argument("--mode", default="multihop", choices=MODES)
    sk.add_argument("--no-rerank", action="store_true", help="read BM25's first snippet instead of the lowest-U one")
    sk.add_argument("--no-select", action="store_true", help="keep the loop's answer instead of choosing a route")
    sk.add_argument(
        "--rationale",
        default="reread",
        choices=RATIONALE_FORMS,
        help="rationale route: re-read the steps (authors' code) or append the final cue (paper)",
    )
    sk.add_argument("--threshold", type=float, help="multihop: δ, retrieve when U > δ (or give --target-rate)")
    sk.add_argument(
        "--target-rate",
        type=rate,
        help="multihop: calibrate δ so that this share of the --train questions retrieves at their first step",
    )
    sk.add_argument(
        "--train",
        type=data_file,
        help="with --target-rate: QA records (JSONL) whose questions calibrate δ" + bundled_help(),
    )
    sk.add_argument(
        "--demos",
        type=demo_count,
        default=len(DEFAULT_DEMOS),
        help=f"the first N of the {len(DEFAULT_DEMOS)} few-shot demonstrations in every prompt "
        f"(default {len(DEFAULT_DEMOS)}; fewer make shorter prompts, read sooner)",
    )
    sk.add_argument(
        "--samples", type=samples, default=20, help=f"k samples per uncertainty estimate (1..{MAX_SAMPLES}, default 20)"
    )
    # Token budgets: the defaults are SeaKR's; smaller ones answer sooner.
    for flag, owner, name, what in (
        ("--sample-tokens", SelfAwareUncertainty, "max_new_tokens", "per sample of an uncertainty estimate"),
        ("--step-tokens", SeaKRPipeline, "step_tokens", "per reasoning step"),
        ("--answer-tokens", SeaKRPipeline, "answer_tokens", "per full chain of thought"),
    ):
        default = inspect.signature(owner).parameters[name].default
        bounds = f"1..{MAX_NEW_TOKENS}, default {default}"
        sk.add_argument(flag, type=max_tokens, default=default, help=f"new tokens at most {what} ({bounds})")
    sk.add_argument("--max-steps", type=positive_int, default=7)
    sk.add_argument("--max-docs", type=positive_int, default=5)
    sk.add_argument("--checkpoint", type=output_file, help="JSONL of finished questions: appended, and reused on rerun")
    sk.add_argument("--model", help="HF model id or path (default: embedded SmolLM2-135M-Instruct)")
    sk.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the SeaKR pipeline on QA records over a BM25 index of the corpus; report EM/F1."""
    from ..models.defaults import default_llm
    from ..models.lm.local import LocalCausalLM
    from ..records.data import load_qa
    from ..retrieval import BM25Retriever
    from ..seakr.reasoning_prompt import DEFAULT_DEMOS
    from ..seakr.runner import run_pipeline
    from ..seakr.uncertainty import SelfAwareUncertainty

    _check_delta(args)
    records = load_qa(args.test)[: args.limit]
    calibration = [r.question for r in load_qa(args.train)] if args.train is not None else None
    lm = LocalCausalLM(args.model) if args.model else default_llm()
    report = run_pipeline(
        records,
        BM25Retriever.from_jsonl(args.corpus),
        lm=lm,
        uncertainty=SelfAwareUncertainty(lm, k=args.samples, max_new_tokens=args.sample_tokens),
        threshold=args.threshold,
        target_rate=args.target_rate,
        calibration_questions=calibration,
        mode=args.mode,
        demos=DEFAULT_DEMOS[: args.demos],
        rerank=not args.no_rerank,
        select=not args.no_select,
        rationale=args.rationale,
        max_steps=args.max_steps,
        max_docs=args.max_docs,
        step_tokens=args.step_tokens,
        answer_tokens=args.answer_tokens,
        checkpoint=args.checkpoint,
    )
    write_report("--json", args.json, json.dumps(report, indent=2, allow_nan=False))
    calibrated = report["calibration"]
    delta = report["settings"]["threshold"]
    print(
        f"seakr {report['mode']}: n={report['n']} em={report['em']:.3f} f1={report['f1']:.3f} "
        f"retrieval_calls={report['retrieval_calls']} ({report['retrieval_calls_per_question']:.2f}/question) "
        f"errors={report['errors']}"
        + ("" if delta is None else f" δ={delta}")
        + (
            ""
            if calibrated is None
            else f" (calibrated on {calibrated['n']} questions: rate {calibrated['realised_rate']:.2f})"
        )
        + f" | {args.json}"
    )
    return 0


def demo_count(text: str) -> int:
    """How many of the default demonstrations to use: at least one, at most all of them."""
    from ..seakr.reasoning_prompt import DEFAULT_DEMOS

    value = positive_int(text)
    if value > len(DEFAULT_DEMOS):
        raise argparse.ArgumentTypeError(
            f"must be at most {len(DEFAULT_DEMOS)} (the demonstrations there are), got {text!r}"
        )
    return value


def _check_delta(args: argparse.Namespace) -> None:
    """δ's flags, checked first: a run without δ (or with two) fails before any file is
    read or model loaded."""
    delta_flags = [
        flag
        for flag, value in (("--threshold", args.threshold), ("--target-rate", args.target_rate))
        if value is not None
    ]
    if args.mode != "multihop":
        if delta_flags:
            raise UsageError(f"{' and '.join(delta_flags)}: δ is used by --mode multihop only, not {args.mode}")
        if args.train is not None:
            raise UsageError("--train goes with --target-rate, which --mode multihop uses")
    elif not delta_flags:
        raise UsageError(
            "--mode multihop needs δ: give --threshold D, or --target-rate R with --train "
            "QA.jsonl to calibrate it on those questions (δ moves with the model and settings)"
        )
    elif len(delta_flags) == 2:
        raise UsageError("give --threshold or --target-rate, not both")
    elif args.target_rate is not None and args.train is None:
        raise UsageError("--target-rate calibrates δ on the questions of --train: give --train QA.jsonl")
    elif args.threshold is not None and args.train is not None:
        raise UsageError("--train goes with --target-rate; with --threshold there is nothing to calibrate")
