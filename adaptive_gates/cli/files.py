"""The command's files: inputs and outputs tried as the arguments are parsed, so a
path that cannot serve fails before the work, and the report written after it.

``FILE_ROLES`` says what each type's files are to the command (read, written, or a
directory replaced whole): ``file_clashes`` reads it to keep outputs apart from inputs.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from ..persistence.atomic_file import write_text_whole
from ..persistence.writable import check_creatable, check_writable

#: What a file argument is to its command: read, written (replaced or appended to),
#: or a directory written whole in place of what was there.
Role = Literal["input", "output", "directory"]


def input_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def data_file(text: str) -> Path:
    """A data file (JSONL), or ``bundled:<task>`` for an AdaRAGUE outcome split the
    package ships (``BUNDLED_HELP``)."""
    from ..bundled.datasets import BUNDLED_PREFIX, data_location

    if not text.startswith(BUNDLED_PREFIX):
        return input_file(text)
    try:
        return data_location(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bundled_help() -> str:
    """What a data file's help says of the packaged splits, with their names."""
    from ..bundled.datasets import bundled_names

    return "; or an AdaRAGUE split the package ships (Llama-3.1-8B-Instruct's outcomes on 500 questions): " + ", ".join(
        bundled_names()
    )


def output_file(text: str) -> Path:
    """A file to append to (or create), tried now: a folder that cannot take it fails
    before the work, not after."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"is a directory, not a file: {text}")
    return _tried_output(text, check_writable)


def report_file(text: str) -> Path:
    """A file written whole when the work is done (``atomic_file``): its folder must
    take the new file that replaces it, and an existing file must be writable (an
    immutable one cannot be replaced either)."""
    path = output_file(text)
    if not path.exists() or path.is_file():
        _tried_output(text, check_creatable)
    return path


def plot_file(text: str) -> Path:
    """A plot to write whole, in a format its suffix names and matplotlib writes."""
    from ..evaluation.plot import check_plot_path

    path = report_file(text)
    try:
        check_plot_path(path)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return path


def saved_gate(text: str) -> Path:
    """A saved gate's directory, or ``pretrained:<name>`` for a gate the package ships."""
    from ..bundled.shipped import gate_location

    try:
        return gate_location(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gate_directory(text: str) -> Path:
    """Where ``fit`` saves a gate: ``Gate.save`` writes hidden siblings and a lock file
    next to it, so its parent folder (or the nearest that exists) must take new files;
    never the folder of the gates the package ships (refused before anything is tried there)."""
    from ..persistence.shipped_folder import check_not_shipped

    try:
        check_not_shipped(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return _tried_output(text, check_creatable)


#: The types above by what their files are to the command.
FILE_ROLES: dict[Callable[[str], Any], Role] = {
    input_file: "input",
    data_file: "input",
    saved_gate: "input",
    output_file: "output",
    report_file: "output",
    plot_file: "output",
    gate_directory: "directory",
}


def _tried_output(text: str, check: Callable[[Path], None]) -> Path:
    """``text`` as a path once ``check`` (``check_writable`` or ``check_creatable``)
    has tried writing there; its failure becomes the argument's error."""
    path = Path(text)
    try:
        check(path)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc}") from None
    return path


def write_report(flag: str, path: Path, text: str) -> None:
    """Write a finished report (``--json``) to ``path`` whole (``atomic_file``)."""
    with written_output(flag, path):
        write_text_whole(path, text)


@contextlib.contextmanager
def written_output(flag: str, path: Path) -> Iterator[None]:
    """Report a write to ``path`` that fails in this block as an ``OSError`` naming the
    flag and the file. The path was tried before the work; a write can fail even so (a
    full disk, a folder made read-only meanwhile), and then leaves the old file."""
    try:
        yield
    except OSError as exc:
        raise OSError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
