"""``adaptive-gates fit``: a gate fitted on outcome records, calibrated, and saved."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import UsageError
from .arguments import max_rate, rate
from .files import gate_directory
from .gate_options import add_gate_arguments, gate_factory, gate_outcomes


def add_parser(sub: Any) -> None:
    fit = sub.add_parser("fit", help="fit, calibrate and save a gate from outcome records")
    add_gate_arguments(fit)
    fit.add_argument("--out", required=True, type=gate_directory, help="directory to save the gate in")
    fit.add_argument("--target-rate", type=rate, help="calibrate for this retrieval rate")
    fit.add_argument("--objective", action="store_true", help="calibrate for the best accuracy")
    fit.add_argument("--max-rate", type=max_rate, help="with --objective: retrieve at most this share")
    fit.add_argument("--overwrite", action="store_true", help="replace a gate saved at --out")
    fit.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.offline import fit_calibrated
    from ..persistence.saved_format import check_save_target

    if args.train is None:
        raise UsageError("--train is required (outcome records to fit on)")
    if args.max_rate is not None and not args.objective:
        raise UsageError("--max-rate goes with --objective")
    if args.objective and args.target_rate is not None:
        raise UsageError("give --target-rate or --objective, not both")
    if args.out.exists() and not args.overwrite:
        raise UsageError(f"--out {args.out} already exists; give --overwrite to replace the gate saved there")
    if args.overwrite:
        try:
            check_save_target(args.out, overwrite=True)  # what --overwrite may not replace, refused before the fit
        except FileExistsError as exc:
            raise UsageError(f"--out {exc}") from None
    factory = gate_factory(args)
    gate = fit_calibrated(
        factory,
        gate_outcomes(args, args.train),
        args.metric,
        target_rate=args.target_rate,
        objective=args.objective,
        max_rate=args.max_rate,
    )
    gate.save(args.out, overwrite=args.overwrite)
    print(f"saved {gate!r} to {args.out} (threshold {gate.threshold_:.4f})")
    return 0
