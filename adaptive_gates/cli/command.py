"""The ``adaptive-gates`` command: ``eval``, ``fit``, ``collect``, ``seakr`` and ``serve``.

Every mistake on the command line (a bad value, options that do not go together, an
input that is missing, an output that cannot be written or that is one of the
command's inputs) is found before any work
starts and reported the same way: one ``adaptive-gates: error: ...`` line on stderr and
exit status 2. A write that still fails at the end (a full disk) is reported alike.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from ..errors import AdaptiveGatesError, UsageError
from . import collect, evaluate, fit, seakr, serve
from .file_clashes import check_apart, check_read_once, file_flags


class _HelpFormatter(argparse.HelpFormatter):
    """Help wrapped between words only: a gate's name (``skr-prompt``) is never cut at its hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors reach ``main`` as ``UsageError`` (one report for all)
    and whose help (its sub-commands' too) wraps between words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``adaptive-gates`` command; its errors raise ``UsageError``."""
    parser = _Parser(prog="adaptive-gates", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (evaluate, fit, collect, seakr, serve):
        command.add_parser(sub)
    for subparser in sub.choices.values():
        subparser.set_defaults(file_flags=file_flags(subparser))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``adaptive-gates`` command; returns the exit status (2 on a usage
    or data error, or a file that cannot be read or written, reported as one
    ``adaptive-gates: error: ...`` line on stderr)."""
    try:
        args = build_parser().parse_args(argv)
        check_apart(args.file_flags, args)  # an output on an input is refused before any work
        check_read_once(args.file_flags, args)  # an input twice, or --test among --train
        level = logging.INFO if args.verbose else logging.WARNING
        # The level is the handler's too: a library that lowers its own logger's level
        # (bm25s logs at DEBUG) must not print past it.
        handler = logging.StreamHandler()
        handler.setLevel(level)
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", handlers=[handler])
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return args.run(args)
    except (AdaptiveGatesError, OSError, ValueError) as exc:
        print(f"adaptive-gates: error: {exc}", file=sys.stderr)
        return 2


def _show_warning(message: Warning | str, category: type[Warning], *where: object, **_: object) -> None:
    """A warning of the run (e.g. more neighbours than a memory holds) as one line, as
    the errors are: what it says, not the line of code it came from."""
    print(f"adaptive-gates: warning: {message}", file=sys.stderr)
