"""``adaptive-gates eval``: a gate judged on recorded outcomes, or live on QA records (the
LLM answering now), reported as JSON, a printed summary and a plot.

Offline, four ways (``_mode``): fitted on ``--train`` and scored on ``--test``;
cross-fitted on ``--train`` alone (no ``--test``: each question scored and decided by a
gate fitted on the other ``--folds``, its threshold calibrated on those folds'
out-of-fold scores, for ``--target-rate`` or else for the best accuracy); a saved gate
(``--gate DIR`` or ``pretrained:NAME``) scored on ``--test`` as it is; or ``--live``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..bundled.datasets import bundled_task
from ..bundled.shipped import is_pretrained
from ..errors import UsageError
from ..persistence.json_lines import dumps_line
from .arguments import positive_int, rate
from .backends import corpus_retriever
from .files import bundled_help, data_file, plot_file, report_file, write_report, written_output
from .gate_options import (
    add_fold_arguments,
    add_gate_arguments,
    fit_labels,
    gate_factory,
    gate_outcomes,
    training_outcomes,
)
from .saved_gates import check_scored_as_saved, load_saved_gate, saved_location

if TYPE_CHECKING:
    from ..answering.answerer import LLMAnswerer
    from ..gates.base.gate import Gate
    from ..records.data import OutcomeRecord

#: Folds of a cross-fitted report when ``--folds`` is not given.
DEFAULT_FOLDS = 5


def add_parser(sub: Any) -> None:
    ev = sub.add_parser(
        "eval",
        help="fit a gate on TRAIN outcomes and evaluate it on TEST outcomes, cross-fit it on TRAIN alone, "
        "score a saved gate on TEST, or evaluate live on QA records",
    )
    add_gate_arguments(ev, saved=", a saved gate's directory, or pretrained:NAME (scored on --test as it is)")
    ev.add_argument(
        "--test",
        type=data_file,
        help="outcome records (JSONL) to evaluate on, judged against their gold answers when every record has "
        "some, else by agreement with the answer with retrieval; without --test, --train is cross-fitted"
        + bundled_help(),
    )
    ev.add_argument("--json", required=True, type=report_file, help="where to write the report")
    ev.add_argument(
        "--plot",
        type=plot_file,
        help="where to write the accuracy-vs-retrieval-rate plot (its suffix picks the format: .png, .pdf...)",
    )
    ev.add_argument(
        "--decisions",
        type=report_file,
        help="where to write each test question's decision (JSONL: id, question, score, retrieve, and fold "
        "when cross-fitted)",
    )
    ev.add_argument(
        "--target-rate",
        type=rate,
        help="calibrate the threshold for this retrieval rate (a saved gate: the threshold that retrieved this "
        "share of the questions it was calibrated on, or if it never was, of the test questions' scores)",
    )
    add_fold_arguments(
        ev,
        folds=None,
        what=f"with --train and no --test, a cross-fitted report (default {DEFAULT_FOLDS} folds)",
    )
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
    from ..evaluation import plot_reports

    mode, saved = _mode(args)
    if mode == "live":
        report = _live_report(args)
    elif saved is not None:
        report = _saved_report(args, saved)
    elif mode == "crossfit":
        report = _cross_fitted_report(args)
    else:
        report = _split_report(args)
    write_report("--json", args.json, json.dumps(report, indent=2))
    if args.plot:
        title = f"{report['gate']} on {args.test.name}" if args.test else f"{report['gate']} cross-fitted"
        with written_output("--plot", args.plot):
            plot_reports([report], args.plot, title=title)
    print(_report_line(report))
    if report.get("fitted_on"):
        print(f"the gate was fitted on {_described(report['fitted_on'])}")
    if "alignment" in report:
        print(
            "alignment: "
            + " ".join(f"{k}={v:.3f}" for k, v in report["alignment"].items())
            + f" | fallbacks={report['fallbacks']} drafts_reused={report['drafts_reused']}"
        )
    return 0


def _mode(args: argparse.Namespace) -> tuple[str, Path | None]:
    """Which evaluation the flags ask for (``"live"``, ``"saved"``, ``"crossfit"`` or
    ``"split"``) and the saved gate's directory, if any; every combination that does not
    go together is refused with one line before any work."""
    saved = saved_location(args.gate)
    cross_fitting = args.folds is not None or args.seed is not None
    if args.live:
        if saved is not None:
            raise UsageError(f"--live: --gate {args.gate} is a saved gate, scored offline on --test outcome records")
        if cross_fitting or args.decisions is not None:
            raise UsageError("--folds, --seed and --decisions go with offline evaluation, not --live")
        if args.test is None:
            raise UsageError("--live needs --test (the QA records to answer)")
        return "live", None
    if args.limit is not None:
        raise UsageError("--limit: only with --live")
    if saved is not None:
        check_scored_as_saved(args)
        if args.train is not None:
            raise UsageError(
                f"--train: --gate {args.gate} is a saved gate, scored as it is (nothing is refitted); "
                "give a gate's name to fit one on --train"
            )
        if cross_fitting:
            raise UsageError(f"--folds, --seed: --gate {args.gate} is a saved gate; nothing is cross-fitted")
        if args.test is None:
            raise UsageError(f"--gate {args.gate} is a saved gate: give --test (the outcome records to score it on)")
        if is_pretrained(saved) and (task := bundled_task(args.test)) is not None:
            raise UsageError(
                f"--test bundled:{task}: --gate {args.gate} was fitted on the package's AdaRAGUE splits, this one "
                "among them, so its figure would be of the records it learnt from; give --test outcome records of "
                "your own (adaptive-gates collect)"
            )
        return "saved", saved
    if args.train is None:
        raise UsageError("--train is required (outcome records to fit on), unless --live or --gate names a saved gate")
    if args.test is None:
        return "crossfit", None
    if cross_fitting:
        raise UsageError("--folds, --seed: a cross-fitted report is of --train alone; give --test or --folds, not both")
    return "split", None


def _split_report(args: argparse.Namespace) -> dict[str, Any]:
    """Fitted on --train, scored on --test."""
    from ..evaluation.offline import judge_offline

    factory = gate_factory(args)
    train, test = training_outcomes(args), gate_outcomes(args, args.test)
    judged = judge_offline(
        factory,
        train,
        test,
        metric=args.metric,
        target_rate=args.target_rate,
        labels=fit_labels(args),
        sources=[str(path) for path in args.train],
    )
    _write_decisions(args, test, judged.scores, judged.retrieve)
    return judged.report


def _cross_fitted_report(args: argparse.Namespace) -> dict[str, Any]:
    """Every --train question scored by a gate fitted on the other folds."""
    from ..evaluation.crossfit import evaluate_cross_fitted

    factory = gate_factory(args)
    records = training_outcomes(args)
    report, crossed = evaluate_cross_fitted(
        factory,
        records,
        args.metric,
        args.folds or DEFAULT_FOLDS,
        args.seed or 0,
        name=args.gate,
        labels=fit_labels(args),
        target_rate=args.target_rate,
    )
    _write_decisions(args, records, crossed.scores, crossed.retrieve, crossed.fold)
    return report


def _saved_report(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    """The gate saved in ``directory`` scored on --test as it is."""
    from ..evaluation.offline import judge_fitted
    from ..records.data import load_outcome_files

    gate = load_saved_gate(args, directory)
    test = load_outcome_files(args.test, require=gate.record_fields)
    # A test of another model's answers is warned of (ModelMismatchWarning): one line on stderr.
    judged = judge_fitted(gate, test, args.metric, args.target_rate)
    judged.report["gate_location"] = args.gate
    _write_decisions(args, test, judged.scores, judged.retrieve)
    return judged.report


def _write_decisions(
    args: argparse.Namespace,
    records: Sequence[OutcomeRecord],
    scores: np.ndarray,
    retrieve: np.ndarray,
    fold: np.ndarray | None = None,
) -> None:
    """With --decisions, one JSON line per question: its id, question, need score and
    decision (and the fold that held it out, when cross-fitted)."""
    path: Path | None = args.decisions
    if path is None:
        return
    lines = []
    for i, record in enumerate(records):
        row: dict[str, Any] = {
            "id": record.id,
            "question": record.question,
            "score": float(scores[i]),
            "retrieve": bool(retrieve[i]),
        }
        if fold is not None:
            row["fold"] = int(fold[i])
        lines.append(dumps_line(row))
    write_report("--decisions", path, "".join(lines))


def _described(fitted_on: dict[str, Any]) -> str:
    """A report's ``fitted_on`` as ``FittedOn.describe`` says it."""
    from ..gates.base.fitted_on import FittedOn

    return FittedOn.from_dict("report", fitted_on).describe()


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
        f"{_how_judged(report)}"
    )


def _how_judged(report: dict[str, Any]) -> str:
    """The end of the printed summary: how the gate was fitted (its labels), how the
    test records were judged, and the folds of a cross-fitted report."""
    if "judged_by" not in report:
        return ""
    labels = report.get("labels")
    fitted = f"fitted on {labels} labels" if labels else "its labels not recorded"
    folds = f", cross-fitted in {report['n_folds']} folds (seed {report['seed']})" if "n_folds" in report else ""
    return f" | {fitted}, judged by {report['judged_by']}{folds}"


def _live_report(args: argparse.Namespace) -> dict[str, Any]:
    """Fit (if the gate learns) and calibrate (if asked) on --train, then run live on --test."""
    from ..evaluation import evaluate_live
    from ..records.data import load_qa

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
    labels = None
    if not gate.is_fitted:
        labels = fit_labels(args)
        sources = [str(path) for path in args.train]
        gate.fit_outcomes(training_outcomes(args), metric=args.metric, labels=labels, sources=sources)
    if args.target_rate is not None:
        # Only the questions are needed: QA records serve as well as outcome records.
        gate.calibrate([r.question for path in args.train for r in load_qa(path)], args.target_rate)
    answerer = _live_answerer(gate, args.batch_size)
    report = evaluate_live(
        gate,
        records,
        retriever,
        answerer,
        k=args.k,
        metric=args.metric,
        target_rate=args.target_rate,
        batch_size=args.batch_size,
    )
    # Live answers are graded against the QA records' gold answers.
    report.update(labels=labels, judged_by="gold")
    return report


def _live_answerer(gate: Gate, batch_size: int) -> LLMAnswerer:
    """The answerer of a live run: the gate's own chat model, asked with the prompts its
    drafts were written with, so a reused draft and an answer with passages differ by
    the passages alone (the log-prob and draft-check gates draft with the package's
    answer prompt, SKR §1.3; the others with the When-to-Retrieve prompts)."""
    from ..answering.answerer import LLMAnswerer
    from ..gates.draft_check.gate import DraftCheckGate
    from ..gates.logprob import LogprobGate

    chat = getattr(gate, "chat", None)
    if isinstance(gate, (LogprobGate, DraftCheckGate)):
        return LLMAnswerer(chat, instruction=gate.instruction, max_new_tokens=gate.max_tokens, batch_size=batch_size)
    return LLMAnswerer(chat, style="when-to-retrieve", batch_size=batch_size)
