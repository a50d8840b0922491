"""``adaptive-gates fit``: a gate fitted on outcome records, calibrated, and saved.

It says what the gate learned from (``FittedOn.describe``: whose outcomes, how many,
labelled how, from which files) and what to expect of it: the gap capture of its
cross-fitted scores on its own training records (each scored by a gate fitted on the
other folds) beside the band random gates reach there. With ``--learning-curve`` it
also plots how that figure grows with the outcomes used, so a user sees whether
collecting more would help.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .arguments import max_rate, rate
from .files import gate_directory, plot_file, written_output
from .gate_options import add_fold_arguments, add_gate_arguments, fit_labels, gate_factory, training_outcomes

if TYPE_CHECKING:
    import numpy as np

    from ..records.data import OutcomeRecord

#: Folds of the cross-fit behind calibration, the printed figure and the learning curve.
DEFAULT_FOLDS = 5


def add_parser(sub: Any) -> None:
    fit = sub.add_parser("fit", help="fit, calibrate and save a gate from outcome records")
    add_gate_arguments(fit)
    fit.add_argument("--out", required=True, type=gate_directory, help="directory to save the gate in")
    fit.add_argument("--target-rate", type=rate, help="calibrate for this retrieval rate")
    fit.add_argument("--objective", action="store_true", help="calibrate for the best accuracy")
    fit.add_argument("--max-rate", type=max_rate, help="with --objective: retrieve at most this share")
    fit.add_argument("--overwrite", action="store_true", help="replace a gate saved at --out")
    add_fold_arguments(
        fit,
        folds=DEFAULT_FOLDS,
        what="the cross-fit that calibrates, gives the printed figure and each point of --learning-curve",
    )
    fit.add_argument(
        "--no-crossfit",
        action="store_true",
        help="skip the cross-fitted figure on the training records (faster; a calibration cross-fits anyway)",
    )
    fit.add_argument(
        "--learning-curve",
        type=plot_file,
        metavar="PLOT",
        help="also plot (and print) the cross-fitted gap capture against the number of outcomes used: subsets "
        "of 50, 100, 200, ... and all records, each drawn and cross-fitted with three seeds from --seed on (its "
        "suffix picks the format)",
    )
    fit.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.learning_curve import default_sizes
    from ..evaluation.offline import fit_calibrated
    from ..gates.base.folds import cross_fitted_scores
    from ..persistence.saved_format import check_save_target

    if args.train is None:
        raise UsageError("--train is required (outcome records to fit on)")
    if args.max_rate is not None and not args.objective:
        raise UsageError("--max-rate goes with --objective")
    if args.objective and args.target_rate is not None:
        raise UsageError("give --target-rate or --objective, not both")
    if args.objective and args.labels == "agreement":
        raise UsageError(
            "--objective with --labels agreement: the answer with retrieval is the reference, so the best "
            "accuracy is always to retrieve; calibrate for a retrieval rate with --target-rate"
        )
    if args.out.exists() and not args.overwrite:
        raise UsageError(f"--out {args.out} already exists; give --overwrite to replace the gate saved there")
    if args.overwrite:
        try:
            check_save_target(args.out, overwrite=True)  # what --overwrite may not replace, refused before the fit
        except FileExistsError as exc:
            raise UsageError(f"--out {exc}") from None
    factory = gate_factory(args)
    labels, seed = fit_labels(args), args.seed or 0
    records = training_outcomes(args)
    if args.learning_curve:
        default_sizes(len(records), args.folds)  # too few records refused before the fit
    calibrating = args.target_rate is not None or args.objective
    # One cross-fit serves the calibration and the printed figure.
    oof = None
    if calibrating or not args.no_crossfit:
        oof = cross_fitted_scores(factory, records, args.metric, args.folds, seed, labels=labels)
    gate = fit_calibrated(
        factory,
        records,
        args.metric,
        target_rate=args.target_rate,
        objective=args.objective,
        max_rate=args.max_rate,
        folds=args.folds,
        seed=seed,
        labels=labels,
        sources=[str(path) for path in args.train],
        out_of_fold=oof,
    )
    if gate.fitted_on_ is not None:
        print(f"fitted on {gate.fitted_on_.describe()}")
    if oof is not None and not args.no_crossfit:
        print(_cross_fitted_line(args, records, oof))
    gate.save(args.out, overwrite=args.overwrite)
    print(f"saved {gate!r} to {args.out} (threshold {gate.threshold_:.4f})")
    if args.learning_curve:
        _learning_curve(args, records)
    return 0


def _cross_fitted_line(args: argparse.Namespace, records: Sequence[OutcomeRecord], oof: np.ndarray) -> str:
    """What to expect of the saved gate: the gap capture of its cross-fitted scores on
    its own training records, beside the band of random gates there."""
    from ..evaluation import evaluate_scores, random_band
    from ..evaluation.judging import graded_outcomes, judged_by

    judge = judged_by(records)
    a, b = graded_outcomes(records, args.metric, judge)
    report = evaluate_scores(oof, a, b, gate=args.gate, metric=args.metric)
    band = random_band(a, b)["gap_capture"]

    def num(value: float | None) -> str:
        return "n/a" if value is None else f"{value:+.3f}"

    chance = "n/a" if band is None else f"[{band[0]:+.3f}, {band[1]:+.3f}]"
    return (
        f"cross-fitted on its {len(records)} training records ({args.folds} folds, seed {args.seed or 0}, "
        f"judged by {judge}): gap_capture={num(report['gap_capture'])} auroc={num(report['decision_auroc'])} "
        f"| random 95%: gap_capture={chance}"
    )


def _learning_curve(args: argparse.Namespace, records: Sequence[OutcomeRecord]) -> None:
    """Print and plot the cross-fitted gap capture against the outcomes used."""
    from ..evaluation.learning_curve import DEFAULT_SEEDS, learning_curve
    from ..evaluation.learning_plot import plot_learning_curve

    first = args.seed or 0

    curve = learning_curve(
        gate_factory(args),
        records,
        name=args.gate,
        metric=args.metric,
        labels=fit_labels(args),
        folds=args.folds,
        seeds=[first + seed for seed in DEFAULT_SEEDS],
        progress=True,
    )
    print(curve.table())
    with written_output("--learning-curve", args.learning_curve):
        plot_learning_curve(curve, args.learning_curve)
