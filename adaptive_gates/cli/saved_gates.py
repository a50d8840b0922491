"""A gate ``eval`` scores as it was saved: a shipped one (``pretrained:NAME``) or a
directory ``fit`` wrote, loaded with the backends the command line gives (``--corpus``
and ``--retriever`` for a gate that retrieves to decide, ``--embedder``...)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from .backends import backends_from_args

if TYPE_CHECKING:
    from ..gates.base.gate import Gate

#: How ``--gate`` names a shipped gate.
PRETRAINED_PREFIX = "pretrained:"
#: The flags that describe how a gate is built and fitted, which a saved gate fixed.
FITTING_FLAGS = ("--option", "--strategy", "--labels")


def saved_location(text: str) -> Path | None:
    """The directory ``--gate`` names when it is a saved gate: ``pretrained:NAME`` or a
    directory (a registered gate's name is that gate, built fresh: a directory named
    like one is reached as ``./NAME``); ``None`` for a gate's name."""
    from ..bundled.shipped import gate_location
    from ..gates.base.gate import Gate

    if text.startswith(PRETRAINED_PREFIX):
        try:
            return gate_location(text)
        except ValueError as exc:
            raise UsageError(f"--gate: {exc}") from None
    if text in Gate.gate_names() or not Path(text).is_dir():
        return None
    return Path(text)


def check_scored_as_saved(args: argparse.Namespace) -> None:
    """Refuse the flags that fit a gate: a saved gate is scored as it is."""
    given = [flag for flag in FITTING_FLAGS if getattr(args, flag.lstrip("-")) is not None]
    if given:
        raise UsageError(
            f"{', '.join(given)}: --gate {args.gate} is a saved gate, scored as it was fitted; "
            "give a gate's name to fit one"
        )


def load_saved_gate(args: argparse.Namespace, directory: Path) -> Gate:
    """The gate saved in ``directory`` with the backends its class takes from the
    command line (a flag for a backend it does not take is refused)."""
    from ..gates.base.gate import Gate
    from ..gates.base.saved import member_backends
    from ..persistence.saved_format import config_field, read_config

    gate_type = config_field(read_config(directory), "gate_type", str)
    if gate_type not in Gate.gate_names():
        raise UsageError(f"--gate {args.gate}: field 'gate_type' is {gate_type!r}, which is no known gate")
    cls = Gate.gate_class(gate_type)
    backends = backends_from_args(args, gate_type, cls.backend_params)
    return Gate.load(directory, **member_backends(cls, backends))
