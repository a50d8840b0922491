"""``adaptive-gates serve``: an OpenAI-compatible chat server that retrieves only when
its gate says so, with a page at ``/`` that shows every decision.

The gate is loaded from its directory, the corpus' passages are embedded into an
in-process faiss index, and the upstream LLM is an OpenAI-compatible server (vLLM,
llama.cpp, Ollama, OpenAI) or, without one, the embedded model. Feedback on an answer
teaches the gate; what it learns is saved back to the gate's directory (``--no-save``
keeps the directory as it is).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .arguments import base_url, non_negative_int, positive_int, seconds
from .files import input_file

if TYPE_CHECKING:
    from ..gates.base import Gate
    from ..models.chat import ChatModel
    from ..serve.service import ChatService

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    serve = sub.add_parser("serve", help="an OpenAI-compatible chat server that retrieves only when needed")
    serve.add_argument("--gate", required=True, type=Path, help="directory of a saved gate")
    serve.add_argument("--corpus", required=True, type=input_file, help="corpus records (JSONL: id, title, text)")
    serve.add_argument("--upstream-base-url", type=base_url, help="the answering LLM's OpenAI-compatible base URL")
    serve.add_argument("--upstream-model", help="the answering LLM's model name (with --upstream-base-url)")
    serve.add_argument("--upstream-api-key-env", help="environment variable holding the upstream's API key")
    serve.add_argument(
        "--upstream-timeout", type=seconds, default=60.0, help="seconds to wait for the upstream (default 60)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=positive_int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument("--k", type=positive_int, default=3, help="passages retrieved when the gate says so")
    serve.add_argument(
        "--history-window", type=non_negative_int, default=2, help="messages of history the gate sees (default 2)"
    )
    serve.add_argument("--max-tokens", type=positive_int, default=128, help="answer length when a request sets none")
    serve.add_argument("--no-save", action="store_true", help="do not save what feedback teaches to --gate")
    serve.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..serve.app import create_app

    service = build_service(args)
    logger.info("serving %s over %s on http://%s:%d", service.gate.name, service.model_id, args.host, args.port)
    uvicorn.run(create_app(service), host=args.host, port=args.port, log_level="warning")
    return 0


def build_service(args: argparse.Namespace) -> ChatService:
    """The service the arguments describe: every input loaded and checked before the
    server listens."""
    from ..serve.service import ChatService
    from .backends import corpus_retriever

    upstream = _upstream(args)
    gate = _load_gate(args.gate, upstream)
    retriever = corpus_retriever("dense", args.corpus)
    return ChatService(
        gate,
        retriever,
        upstream,
        k=args.k,
        history_window=args.history_window,
        max_tokens=args.max_tokens,
        upstream_timeout=args.upstream_timeout,
        after_feedback=None if args.no_save else _saver(gate, args.gate),
    )


def _load_gate(directory: Path, upstream: ChatModel) -> Gate:
    """The saved gate, with the upstream as its chat model if it asks an LLM (a
    verbalized gate's draft answers then come from the model that answers)."""
    from ..gates.base import Gate
    from ..gates.saved import member_backends
    from ..persistence import config_field, read_config

    gate_type = config_field(read_config(directory), "gate_type", str)
    if gate_type not in Gate.gate_names():
        raise UsageError(f"--gate {directory}: field 'gate_type' is {gate_type!r}, which is no known gate")
    return Gate.load(directory, **member_backends(Gate.gate_class(gate_type), {"chat": upstream}))


def _upstream(args: argparse.Namespace) -> ChatModel:
    """The answering LLM: the OpenAI-compatible server named, or the embedded model."""
    if (args.upstream_base_url is None) != (args.upstream_model is None):
        raise UsageError("--upstream-base-url and --upstream-model go together")
    if args.upstream_model is None:
        if args.upstream_api_key_env:
            raise UsageError("--upstream-api-key-env goes with --upstream-base-url")
        from ..models.local_chat import LocalChatModel

        return LocalChatModel()
    from ..models.openai_chat import OpenAIChatModel
    from .backends import api_key

    return OpenAIChatModel(
        args.upstream_model,
        base_url=args.upstream_base_url,
        api_key=api_key(args.upstream_api_key_env, "--upstream-api-key-env"),
        timeout=args.upstream_timeout,
        max_retries=1,
    )


def _saver(gate: Gate, directory: Path) -> Any:
    """Saves the gate over its directory (a learning gate's feedback kept for the next start)."""

    def save() -> None:
        gate.save(directory, overwrite=True)

    return save
