"""The gate that ``eval`` and ``fit`` build: its flags, its parameters and backends
checked against the chosen gate, and the outcome records it scores."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .arguments import key_value
from .backends import add_backend_arguments, backends_from_args
from .files import bundled_help, data_file

if TYPE_CHECKING:
    from ..gates.base.gate import Gate
    from ..records.data import OutcomeRecord
    from ..records.selfknowledge import Labels

#: The target a gate with two heads must fit on agreement labels: its "correct with
#: retrieval" head would learn a constant (the answer over passages is the reference).
AGREEMENT_TARGET = "helps"


def add_gate_arguments(parser: argparse.ArgumentParser, *, saved: str = "") -> None:
    """The flags that build and fit a gate; ``saved``: what else ``--gate`` takes in
    this command (e.g. a saved gate's directory), for its help."""
    parser.add_argument("--gate", required=True, help=f"the gate: {', '.join(buildable_gates())}{saved}")
    parser.add_argument(
        "--train",
        nargs="+",
        type=data_file,
        metavar="TRAIN",
        help="outcome records (JSONL) to fit on: one file, or several whose records are pooled (e.g. the "
        "records of several data sets fit one gate; read in order, an id may repeat across files); with "
        "--live, also the questions --target-rate calibrates on" + bundled_help(),
    )
    parser.add_argument("--metric", default="contains", choices=["contains", "em", "f1"])
    parser.add_argument(
        "--labels",
        choices=["gold", "agreement"],
        help="how the records fitted on are graded: against their gold answers (gold, the default), or against "
        'the answer with retrieval (agreement: records without gold answers, "answers": [], can be fitted on; '
        "a gate with a target parameter then fits target=helps)",
    )
    parser.add_argument(
        "--option",
        action="append",
        type=key_value,
        metavar="KEY=VALUE",
        help="a gate parameter, e.g. --option k=20 --option vote=majority (repeatable)",
    )
    parser.add_argument(
        "--strategy", help="verbalized: vanilla, punish, challenge, step-by-step, generate, explain or punish+explain"
    )
    add_backend_arguments(parser)


def add_fold_arguments(parser: argparse.ArgumentParser, *, folds: int | None, what: str) -> None:
    """``--folds`` and ``--seed``: the cross-fitting's folds and their seed; ``what``
    says what the command cross-fits for, ``folds`` is the default count."""
    default = "" if folds is None else f" (default {folds})"
    parser.add_argument("--folds", type=fold_count, default=folds, metavar="K", help=f"{what}: K folds{default}")
    parser.add_argument("--seed", type=int, help="the seed of the folds' split (default 0)")


def fold_count(text: str) -> int:
    """Folds of a cross-fit: at least two (one fold leaves nothing to fit on)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be an integer of at least 2, got {text!r}")
    return value


def fit_labels(args: argparse.Namespace) -> Labels:
    """The labels the command fits on (``--labels``, default gold)."""
    labels: Labels = args.labels or "gold"
    return labels


def buildable_gates() -> list[str]:
    """The registered gates a command line can build: all but those made of member
    gates (a cascade, a budget), which no flag can give."""
    from ..gates.base.gate import Gate

    return [name for name in Gate.gate_names() if not Gate.gate_class(name).member_params]


def gate_factory(args: argparse.Namespace, *, used_elsewhere: frozenset[str] = frozenset()) -> Callable[[], Gate]:
    """A factory of fresh gates as the command line describes them, tried once now so
    that a bad option fails before minutes of work. ``used_elsewhere``: backend flags
    the command reads for itself, not refused for a gate that takes no such backend."""
    from ..gates.base.gate import Gate

    if args.gate not in buildable_gates():
        if args.gate in Gate.gate_names():
            what = f"gate {args.gate!r} is made of member gates, which no flag gives"
        else:
            what = f"unknown gate {args.gate!r}"
        raise UsageError(f"{what}; choose from {', '.join(buildable_gates())}")
    cls = Gate.gate_class(args.gate)
    kwargs = {
        **_gate_options(args, cls),
        **backends_from_args(args, args.gate, cls.backend_params, used_elsewhere=used_elsewhere),
    }

    def factory() -> Gate:
        return cls(**kwargs)

    try:
        factory()
    except (TypeError, ValueError) as exc:
        raise UsageError(f"gate {args.gate!r}: {exc}") from None
    return factory


def training_outcomes(args: argparse.Namespace) -> list[OutcomeRecord]:
    """The records of ``--train`` (``gate_outcomes``); with gold labels every one must
    have a gold answer (a record without is graded wrong both ways and teaches noise)."""
    from ..evaluation.judging import without_gold

    records = gate_outcomes(args, args.train)
    missing = without_gold(records)
    if fit_labels(args) == "gold" and missing:
        raise UsageError(
            f'--train: {missing} of {len(records)} records have no gold answer ("answers": []); '
            "fit on them with --labels agreement (the answer with retrieval as the reference)"
        )
    return records


def gate_outcomes(args: argparse.Namespace, paths: Path | Sequence[Path]) -> list[OutcomeRecord]:
    """The outcome records of ``paths`` (one file, or several pooled in order, as
    ``--train`` gives them), each holding the fields the chosen gate scores offline
    (``Gate.record_fields``, e.g. recorded log-probabilities): a line without one is an
    error naming its file and line before any work starts."""
    from ..gates.base.gate import Gate
    from ..records.data import load_outcome_files

    return load_outcome_files(paths, require=Gate.gate_class(args.gate).record_fields)


def _gate_options(args: argparse.Namespace, cls: type[Gate]) -> dict[str, Any]:
    """The ``--option`` and ``--strategy`` parameters, each checked against the gate's own
    (its backends, model objects no ``--option`` value can be, come from their own flags)."""
    parameters = [p for p in cls.param_names() if p not in cls.backend_params | cls.member_params]
    options = dict(args.option or [])
    for key in options:
        if key not in parameters:
            raise UsageError(
                f"--option {key}: gate {args.gate!r} has no such parameter; its parameters are {', '.join(parameters)}"
            )
    if args.strategy is not None:
        if "strategy" not in parameters:
            raise UsageError(f"--strategy: gate {args.gate!r} has no strategy")
        options["strategy"] = args.strategy
    if fit_labels(args) == "agreement" and "target" in parameters:
        options.setdefault("target", AGREEMENT_TARGET)
        if options["target"] == "gain":
            raise UsageError(
                "--option target=gain: with --labels agreement the answer with retrieval is the "
                f"reference, so correctness with retrieval is constant and only target={AGREEMENT_TARGET} can be "
                "learnt (set by default)"
            )
    return options
