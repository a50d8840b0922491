"""The backends a gate takes, in one table that ``eval``, ``fit`` and ``serve`` build
from: each kind's flags, how a command line builds it, and what ``serve`` gives it. A
gate that needs a new kind of backend adds one row to ``BACKEND_KINDS``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .arguments import base_url
from .files import input_file

if TYPE_CHECKING:
    from ..models.chat.base import ChatModel
    from ..models.embedding.cached import CachedEmbedder
    from ..models.protocols import Embedder
    from ..retrieval.base import Retriever


@dataclass(frozen=True)
class Served:
    """What ``serve`` holds that its gate may take: the LLM that answers (a gate that
    drafts then drafts with it), the embedder it retrieves with and its retriever (a
    gate that checks its draft retrieves through it). No embedder where nothing embeds."""

    chat: ChatModel
    embedder: Embedder | None
    retriever: Retriever


@dataclass(frozen=True)
class BackendKind:
    """One kind of backend: the gate parameter it fills, the flags that describe it, and
    how each command builds it. ``from_args`` returning ``None`` leaves the gate's own
    default; a kind without ``from_server`` is the saved gate's own when served."""

    param: str
    lacks: str  # how an error says a gate does not take it
    flags: tuple[str, ...]  # the flags this kind adds
    add_arguments: Callable[[argparse.ArgumentParser], None]
    from_args: Callable[[argparse.Namespace], Any]
    from_server: Callable[[Served], Any] | None = None
    also_reads: tuple[str, ...] = ()  # flags another kind adds that this one reads too
    needs: str | None = None  # what a gate that takes it must be given (it has no default)


def chat_model(args: argparse.Namespace) -> ChatModel | None:
    """The OpenAI-compatible chat model of ``--chat-model`` / ``--base-url`` (and
    ``--timeout`` where the command has it), if any."""
    if args.chat_model is None:
        if args.base_url:
            raise UsageError("--base-url goes with --chat-model")
        return None
    from ..models.chat.openai_chat import OpenAIChatModel

    key = api_key(getattr(args, "api_key_env", None))
    timeout = getattr(args, "timeout", None)
    if timeout is None:
        return OpenAIChatModel(args.chat_model, base_url=args.base_url, api_key=key)
    return OpenAIChatModel(args.chat_model, base_url=args.base_url, api_key=key, timeout=timeout)


def api_key(name: str | None, flag: str = "--api-key-env") -> str | None:
    """The key in the environment variable ``name`` that ``flag`` gives (the key itself
    never goes on a command line); ``None`` leaves it to ``OpenAIChatModel``."""
    if name is None:
        return None
    key = os.environ.get(name)
    if not key:
        raise UsageError(f"{flag}: the environment variable {name} is not set")
    return key


def representer(args: argparse.Namespace) -> CachedEmbedder:
    """The representer of ``--representer`` (memoised: cross-fitting sees each question often)."""
    from ..models.embedding.cached import CachedEmbedder
    from ..models.representers import LMHiddenStateRepresenter

    if args.representer == "embedder":
        if args.layer is not None or args.pooling is not None:
            raise UsageError("--layer and --pooling go with --representer lm")
        return memoised_embedder(args)
    if args.embedder:
        raise UsageError("--embedder goes with --representer embedder for this gate")
    return CachedEmbedder(
        LMHiddenStateRepresenter(layer=-1 if args.layer is None else args.layer, pooling=args.pooling or "last_token")
    )


def memoised_embedder(args: argparse.Namespace) -> CachedEmbedder:
    """The sentence-transformers model of ``--embedder`` (default: the embedded MiniLM)
    behind a memo for the command: cross-fitting, calibration and a gate's members
    embed each question once, not once per fold."""
    from ..models.defaults import sentence_embedder
    from ..models.embedding.cached import CachedEmbedder

    return CachedEmbedder(sentence_embedder(args.embedder) if args.embedder else _default_embedder())


def corpus_retriever(kind: str, corpus: Path) -> Retriever:
    """The ``--retriever`` (``bm25`` or ``dense``) over the corpus records of ``corpus``."""
    if kind == "bm25":
        from ..retrieval import BM25Retriever

        return BM25Retriever.from_jsonl(corpus)
    from ..retrieval import DenseRetriever

    return DenseRetriever.from_jsonl(corpus, _default_embedder())


def _corpus_retriever(args: argparse.Namespace) -> Retriever | None:
    """The retriever of ``--corpus`` and ``--retriever`` (BM25 by default), if a corpus is given."""
    if args.corpus is None:
        if args.retriever is not None:
            raise UsageError("--retriever goes with --corpus")
        return None
    return corpus_retriever(args.retriever or "bm25", args.corpus)


def _default_embedder() -> Embedder:
    from ..models.defaults import default_embedder

    return default_embedder()


def _chat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chat-model", help="gates that ask an LLM: an OpenAI-compatible model name (default: the embedded SmolLM2)"
    )
    parser.add_argument(
        "--base-url", type=base_url, help="with --chat-model: the server's base URL (default: the SDK's)"
    )


def _representer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--representer",
        choices=["lm", "embedder"],
        help="thrust: query representation from the LM's hidden states (default) or a sentence embedder",
    )
    parser.add_argument("--layer", type=int, help="thrust with --representer lm: hidden layer (default -1, the last)")
    parser.add_argument(
        "--pooling", choices=["last_token", "mean"], help="thrust with --representer lm (default last_token)"
    )


def _retriever_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        type=input_file,
        help="corpus records (JSONL: id, title, text): what draft-check checks its drafts against, and with "
        "eval --live the passages answers are given",
    )
    parser.add_argument(
        "--retriever", choices=["bm25", "dense"], help="with --corpus: BM25 (default) or dense over the embedded MiniLM"
    )


def _embedder_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--embedder", help="sentence-transformers model id or path (default: embedded MiniLM)")


BACKEND_KINDS: tuple[BackendKind, ...] = (
    BackendKind(
        "chat",
        "does not ask a chat model",
        ("--chat-model", "--base-url"),
        _chat_arguments,
        chat_model,
        from_server=lambda served: served.chat,
    ),
    BackendKind(
        "representer",
        "has no representer",
        ("--representer", "--layer", "--pooling"),
        _representer_arguments,
        representer,
        also_reads=("--embedder",),
    ),
    BackendKind(
        "retriever",
        "retrieves nothing to decide",
        ("--corpus", "--retriever"),
        _retriever_arguments,
        _corpus_retriever,
        from_server=lambda served: served.retriever,
        needs="--corpus (the passages it checks its drafts against)",
    ),
    BackendKind(
        "embedder",
        "uses no embedder",
        ("--embedder",),
        _embedder_arguments,
        memoised_embedder,
        from_server=lambda served: served.embedder,
    ),
)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Every kind's flags, for a command that builds a gate."""
    for kind in BACKEND_KINDS:
        kind.add_arguments(parser)


def backends_from_args(
    args: argparse.Namespace, gate: str, takes: frozenset[str], *, used_elsewhere: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The backends among ``takes`` (a gate's ``backend_params``) that the command line
    gives; a flag of a kind gate ``gate`` does not take is refused, unless the command
    reads it for itself (``used_elsewhere``: ``eval --live`` retrieves over ``--corpus``)."""
    read = {flag for kind in BACKEND_KINDS if kind.param in takes for flag in (*kind.flags, *kind.also_reads)}
    read |= used_elsewhere
    backends: dict[str, Any] = {}
    for kind in BACKEND_KINDS:
        if kind.param in takes:
            backend = kind.from_args(args)
            if backend is not None:
                backends[kind.param] = backend
            elif kind.needs is not None:
                raise UsageError(f"gate {gate!r} needs {kind.needs}")
            continue
        refused = [flag for flag in kind.flags if flag not in read and _given(args, flag)]
        if refused:
            raise UsageError(f"{', '.join(refused)}: gate {gate!r} {kind.lacks}")
    return backends


def served_backends(served: Served) -> dict[str, Any]:
    """What ``serve`` gives a gate of every kind it can, by parameter name."""
    return {kind.param: kind.from_server(served) for kind in BACKEND_KINDS if kind.from_server is not None}


def _given(args: argparse.Namespace, flag: str) -> bool:
    return getattr(args, flag.lstrip("-").replace("-", "_"), None) is not None
