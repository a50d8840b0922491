"""Outputs kept apart from inputs: a command whose report, plot, checkpoint or saved gate
would land on one of its own input files (or on another of its outputs) is refused
before any work, whatever the spelling (a relative path, a symbolic link, a hard link).

Which arguments name files, and which of those are written, is read from the argument
types of ``files`` each subcommand's parser declares (``files.FILE_ROLES``), so every
subcommand is checked the same way and a new file flag is covered by the type it has.

Inputs are read once (``check_read_once``): a file given twice to ``--train`` would fit
its every record twice, and a ``--test`` file that is also a ``--train`` file would
judge the gate on the records it learnt from; both are refused, however the file is
named (a path, a link, or ``bundled:NAME``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .files import FILE_ROLES, Role


@dataclass(frozen=True)
class FileFlag:
    """A subcommand's argument that names files: its flag, where argparse stores its
    value, and what the command does with them."""

    flag: str
    dest: str
    role: Role

    @property
    def written(self) -> bool:
        return self.role != "input"


def file_flags(parser: argparse.ArgumentParser) -> tuple[FileFlag, ...]:
    """The arguments of ``parser`` whose type is one of ``files.FILE_ROLES``."""
    # argparse lists a parser's arguments (those of its groups too) in ``_actions`` only.
    return tuple(
        FileFlag(action.option_strings[0], action.dest, FILE_ROLES[action.type])
        for action in parser._actions
        if action.option_strings and action.type in FILE_ROLES
    )


def check_apart(flags: tuple[FileFlag, ...], args: argparse.Namespace) -> None:
    """Raise ``UsageError`` naming both flags when an output of ``args`` is the same file
    as an input or as another output (the same resolved path, or the same device and
    inode: a link to the file is caught), or is a directory replaced whole that holds
    an input."""
    given = list(_given(flags, args))
    for i, first in enumerate(given):
        for second in given[i + 1 :]:
            problem = _clash(first, second) or _clash(second, first)
            if problem:
                raise UsageError(problem)


def check_read_once(flags: tuple[FileFlag, ...], args: argparse.Namespace) -> None:
    """Raise ``UsageError`` naming the flags when one input flag names the same file
    twice (``--train a.jsonl a.jsonl``), or ``--test`` names a file ``--train`` does."""
    given = [(flag, path) for flag, path in _given(flags, args) if not flag.written]
    for i, (flag, path) in enumerate(given):
        for other_flag, other_path in given[i + 1 :]:
            if not _same_file(path, other_path):
                continue
            if flag.dest == other_flag.dest:
                raise UsageError(
                    f"{flag.flag} names the same file twice ({path} and {other_path}): its records would count "
                    "twice; give each file once"
                )
            if {flag.dest, other_flag.dest} == {"train", "test"}:
                test, train = (path, other_path) if flag.dest == "test" else (other_path, path)
                raise UsageError(
                    f"--test {test} is the same file as --train {train}: the gate would be judged on the "
                    "records it learnt from; give held-out records to --test (or, for eval, leave --test out "
                    "for a report cross-fitted on --train)"
                )


def _clash(output: tuple[FileFlag, Path], other: tuple[FileFlag, Path]) -> str | None:
    """What is wrong with writing ``output`` on a command line that also names
    ``other``, or ``None`` (also when ``output`` is not written at all)."""
    (flag, path), (other_flag, other_path) = output, other
    if not flag.written:
        return None
    if _same_file(path, other_path):
        why = "give each output a file of its own" if other_flag.written else "an output may not overwrite an input"
        return f"{flag.flag} {path} is the same file as {other_flag.flag} {other_path}; {why}"
    if flag.role == "directory" and _inside(other_path, path):
        return f"{flag.flag} {path} would be replaced whole, and it holds {other_flag.flag} {other_path}"
    return None


def _given(flags: tuple[FileFlag, ...], args: argparse.Namespace) -> Iterator[tuple[FileFlag, Path]]:
    """Each path on the command line with its flag (``--train`` may give several)."""
    for flag in flags:
        value = getattr(args, flag.dest, None)
        for path in value if isinstance(value, list) else [value]:
            if isinstance(path, Path):
                yield flag, path


def _same_file(first: Path, second: Path) -> bool:
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samestat(os.stat(first), os.stat(second))
    except OSError:
        return False  # one of them does not exist yet: no link can join them


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))
