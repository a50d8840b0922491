"""The models and retrievers the command line names: an OpenAI-compatible chat model
and its key, the representer of a gate that has one, and the retriever of a corpus."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from ..models.cached_embedder import CachedEmbedder
    from ..models.chat import ChatModel
    from ..models.protocols import Embedder
    from ..retrieval.base import Retriever


def chat_model(args: argparse.Namespace) -> ChatModel | None:
    """The OpenAI-compatible chat model of ``--chat-model`` / ``--base-url`` (and
    ``--timeout`` where the command has it), if any."""
    if args.chat_model is None:
        if args.base_url:
            raise UsageError("--base-url goes with --chat-model")
        return None
    from ..models.openai_chat import OpenAIChatModel

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
    from ..models.cached_embedder import CachedEmbedder
    from ..representers import LMHiddenStateRepresenter

    inner: Embedder
    if args.representer == "embedder":
        if args.layer is not None or args.pooling is not None:
            raise UsageError("--layer and --pooling go with --representer lm")
        from ..models.defaults import default_embedder
        from ..models.embedder import SentenceEmbedder

        inner = SentenceEmbedder(args.embedder) if args.embedder else default_embedder()
    else:
        if args.embedder:
            raise UsageError("--embedder goes with --representer embedder for this gate")
        inner = LMHiddenStateRepresenter(
            layer=-1 if args.layer is None else args.layer, pooling=args.pooling or "last_token"
        )
    return CachedEmbedder(inner)


def corpus_retriever(kind: str, corpus: Path) -> Retriever:
    """The ``--retriever`` (``bm25`` or ``dense``) over the corpus records of ``corpus``."""
    if kind == "bm25":
        from ..retrieval import BM25Retriever

        return BM25Retriever.from_jsonl(corpus)
    from ..models.defaults import default_embedder
    from ..retrieval import DenseRetriever

    return DenseRetriever.from_jsonl(corpus, default_embedder())
