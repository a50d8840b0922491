"""The command's files: inputs and outputs tried as the arguments are parsed, so a
path that cannot serve fails before the work, and the report written after it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ..persistence.writable import check_creatable, check_writable


def input_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def output_file(text: str) -> Path:
    """A file to write (or append to), tried now: a folder that cannot take it fails
    before the work, not after."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"is a directory, not a file: {text}")
    return _tried_output(text, check_writable)


def plot_file(text: str) -> Path:
    """A plot to write, in a format its suffix names and matplotlib writes."""
    from ..evaluation.plot import check_plot_path

    path = output_file(text)
    try:
        check_plot_path(path)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return path


def saved_gate(text: str) -> Path:
    """A saved gate's directory, or ``pretrained:<name>`` for a gate the package ships."""
    from ..shipped import gate_location

    try:
        return gate_location(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gate_directory(text: str) -> Path:
    """Where ``fit`` saves a gate: ``Gate.save`` writes hidden siblings and a lock file
    next to it, so its parent folder (or the nearest that exists) must take new files."""
    return _tried_output(text, check_creatable)


def _tried_output(text: str, check: Callable[[Path], None]) -> Path:
    """``text`` as a path once ``check`` (``check_writable`` or ``check_creatable``)
    has tried writing there; its failure becomes the argument's error."""
    path = Path(text)
    try:
        check(path)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc}") from None
    return path


def write_report(path: Path, text: str) -> None:
    """Write a finished report (``--json``) to ``path``. The path was tried before the
    work; a write that fails even so (a full disk, a folder made read-only meanwhile)
    is an ``OSError`` naming the flag and the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise OSError(f"--json {path}: cannot write ({exc.strerror or exc})") from None
