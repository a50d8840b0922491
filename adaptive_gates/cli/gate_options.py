"""The gate that ``eval`` and ``fit`` build: its flags, its parameters and backends
checked against the chosen gate, and the outcome records it scores."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .arguments import base_url, key_value
from .backends import chat_model, representer
from .files import input_file

if TYPE_CHECKING:
    from ..data import OutcomeRecord
    from ..gates.base import Gate


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gate", required=True, help=f"the gate: {', '.join(buildable_gates())}")
    parser.add_argument(
        "--train",
        type=input_file,
        help="outcome records (JSONL) to fit on; with --live, also the questions --target-rate calibrates on",
    )
    parser.add_argument("--metric", default="contains", choices=["contains", "em", "f1"])
    parser.add_argument("--embedder", help="sentence-transformers model id or path (default: embedded MiniLM)")
    parser.add_argument(
        "--representer",
        choices=["lm", "embedder"],
        help="thrust: query representation from the LM's hidden states (default) or a sentence embedder",
    )
    parser.add_argument("--layer", type=int, help="thrust with --representer lm: hidden layer (default -1, the last)")
    parser.add_argument(
        "--pooling", choices=["last_token", "mean"], help="thrust with --representer lm (default last_token)"
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
    parser.add_argument(
        "--chat-model", help="gates that ask an LLM: an OpenAI-compatible model name (default: the embedded SmolLM2)"
    )
    parser.add_argument(
        "--base-url", type=base_url, help="with --chat-model: the server's base URL (default: the SDK's)"
    )


def buildable_gates() -> list[str]:
    """The registered gates a command line can build: all but those made of member
    gates (a cascade, a budget), which no flag can give."""
    from ..gates.base import Gate

    return [name for name in Gate.gate_names() if not Gate.gate_class(name).member_params]


def gate_factory(args: argparse.Namespace) -> Callable[[], Gate]:
    """A factory of fresh gates as the command line describes them, tried once now so
    that a bad option fails before minutes of work."""
    from ..gates.base import Gate

    if args.gate not in buildable_gates():
        if args.gate in Gate.gate_names():
            what = f"gate {args.gate!r} is made of member gates, which no flag gives"
        else:
            what = f"unknown gate {args.gate!r}"
        raise UsageError(f"{what}; choose from {', '.join(buildable_gates())}")
    cls = Gate.gate_class(args.gate)
    kwargs = {**_gate_options(args, cls), **_backend_kwargs(args, cls.param_names())}

    def factory() -> Gate:
        return cls(**kwargs)

    try:
        factory()
    except (TypeError, ValueError) as exc:
        raise UsageError(f"gate {args.gate!r}: {exc}") from None
    return factory


def gate_outcomes(args: argparse.Namespace, path: Path) -> list[OutcomeRecord]:
    """The outcome records of ``path``, each holding the fields the chosen gate scores
    offline (``Gate.record_fields``, e.g. recorded log-probabilities): a line without
    one is an error naming it before any work starts."""
    from ..data import load_outcomes
    from ..gates.base import Gate

    return load_outcomes(path, require=Gate.gate_class(args.gate).record_fields)


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
    return options


def _backend_kwargs(args: argparse.Namespace, accepted: Sequence[str]) -> dict[str, Any]:
    """The backends (chat model, embedder or representer) the chosen gate takes, from the command line."""
    if args.chat_model is not None and "chat" not in accepted:
        raise UsageError(f"--chat-model: gate {args.gate!r} does not ask a chat model")
    backends: dict[str, Any] = {}
    chat = chat_model(args)
    if chat is not None:
        backends["chat"] = chat
    if "representer" in accepted:
        return {**backends, "representer": representer(args)}
    representer_flags = [
        f
        for f, v in (("--representer", args.representer), ("--layer", args.layer), ("--pooling", args.pooling))
        if v is not None
    ]
    if representer_flags:
        raise UsageError(f"{', '.join(representer_flags)}: gate {args.gate!r} has no representer")
    if args.embedder:
        if "embedder" not in accepted:
            raise UsageError(f"--embedder: gate {args.gate!r} uses no embedder")
        from ..models.embedder import SentenceEmbedder

        backends["embedder"] = SentenceEmbedder(args.embedder)
    return backends
