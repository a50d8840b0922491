"""``adaptive-gates serve``: an OpenAI-compatible chat server that retrieves only when
its gate says so, with a page at ``/`` that shows every decision.

The flags are read here; ``serve.build`` assembles the service they describe. The
gate is loaded from its directory, the corpus' passages are indexed in process
(embedded into faiss, or BM25), and the upstream LLM is an OpenAI-compatible server (vLLM,
llama.cpp, Ollama, OpenAI) or, without one, the embedded model. Feedback on an answer
teaches the gate; what it learns is saved back to the gate's directory (``--no-save``
keeps the directory as it is). With no arguments it serves a gate the package ships,
fitted (``pretrained:draft-check``), over the Wikipedia paragraphs its AdaRAGUE records
carry, with the embedded model answering, on 127.0.0.1:8000.

With ``--milvus-uri`` the SKR memory and the corpus live in Milvus instead, shared by
every server pointed at it: the first fills the memory's collection with the gate's
questions and indexes the corpus; the others (and a restart) take both as they are, and
feedback is written to the database, not to the directory. Each collection is named
after what it holds (the gate's saved config, the corpus file), so another gate or
corpus never reads one that is not its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import logging
import math
import sys
import time
from collections.abc import Sized
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..gates.shadow.learner import DEFAULT_REFIT_EVERY
from ..serve.build import DEFAULT_GATE
from ..serve.guards import LOOPBACK_NAMES
from ..serve.keys import KEY_VARIABLE, KeyRing
from ..serve.limits import Limits
from .arguments import base_url, ip_address_or_network, max_tokens, non_negative_int, port, positive_int, seconds, share
from .backends import Served, api_key, served_backends
from .files import input_file, saved_gate

if TYPE_CHECKING:
    import uvicorn

    from ..models.chat.base import ChatModel
    from ..serve.service import ChatService

logger = logging.getLogger(__name__)

#: Seconds answers under way get to finish when the server is told to stop.
DEFAULT_DRAIN_SECONDS = 10.0


def add_parser(sub: Any) -> None:
    serve = sub.add_parser("serve", help="an OpenAI-compatible chat server that retrieves only when needed")
    serve.add_argument(
        "--gate",
        type=saved_gate,
        default=DEFAULT_GATE,
        help="directory of a saved gate, or a gate the package ships fitted: pretrained:draft-check "
        f"(with --retriever bm25, as it was fitted) or pretrained:stacked (default {DEFAULT_GATE})",
    )
    serve.add_argument(
        "--corpus",
        type=input_file,
        help="corpus records (JSONL: id, title, text); default: the 8,405 Wikipedia paragraphs the package's "
        "AdaRAGUE records carry (HotpotQA's and 2WikiMultihopQA's), to try the server before indexing your own",
    )
    serve.add_argument("--upstream-base-url", type=base_url, help="the answering LLM's OpenAI-compatible base URL")
    serve.add_argument("--upstream-model", help="the answering LLM's model name (with --upstream-base-url)")
    serve.add_argument("--upstream-api-key-env", help="environment variable holding the upstream's API key")
    serve.add_argument(
        "--model-name",
        action="append",
        metavar="NAME",
        help="a model name /v1/models lists beside 'default' (repeatable; a request may name any model, each an "
        "alias of the served one); default: the "
        "upstream's --upstream-model, or the embedded model's name",
    )
    serve.add_argument(
        "--upstream-timeout", type=seconds, default=60.0, help="seconds to wait for the upstream (default 60)"
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1); another than loopback needs API keys",
    )
    serve.add_argument("--port", type=port, default=8000, help="port to listen on (default 8000)")
    serve.add_argument(
        "--retriever",
        choices=["dense", "bm25"],
        help="dense over the embedded MiniLM or BM25; draft-check gates check drafts through it (default: bm25 "
        "for pretrained:draft-check, as it was fitted; dense otherwise)",
    )
    serve.add_argument("--k", type=positive_int, default=3, help="passages retrieved when the gate says so (default 3)")
    serve.add_argument(
        "--history-window",
        type=non_negative_int,
        default=2,
        help="earlier user questions a follow-up ('and when did he die?') may lean on; the gate judges the last "
        "question alone unless it refers back (default 2)",
    )
    serve.add_argument(
        "--max-tokens", type=max_tokens, default=128, help="answer length when a request sets none (default 128)"
    )
    serve.add_argument("--no-save", action="store_true", help="do not save what feedback teaches to --gate")
    serve.add_argument(
        "--domain",
        help="the domain of the questions served, for a gate fitted with a domain indicator (e.g. fitted with "
        "--option domain_field=task: one of its tasks); a domain it was not fitted on reads as 'other'",
    )
    serve.add_argument(
        "--shadow-rate",
        type=share,
        metavar="R",
        help="a draft-check gate learns the upstream LLM from what it serves: every answer made over the passages "
        "is a pair (draft, answer over passages), and a share R of the questions answered by their draft are also "
        "answered over the passages after the reply (one extra LLM call each, never served); the pairs, weighted by "
        "1/chance, refit the gate; 0: the free pairs only (default: off, nothing recorded)",
    )
    serve.add_argument(
        "--shadow-refit-every",
        type=positive_int,
        default=DEFAULT_REFIT_EVERY,
        metavar="N",
        help=f"pairs between refits with --shadow-rate (default {DEFAULT_REFIT_EVERY})",
    )
    serve.add_argument(
        "--milvus-uri", help="keep the SKR memory and the corpus in Milvus at this URI (shared by every server)"
    )
    serve.add_argument(
        "--state-url",
        metavar="URL",
        help="keep the decision book, the lessons, the feedback quotas and the rate limits in Redis at this URL "
        "(redis://HOST:PORT/DB), shared by every server given it (needs the redis extra)",
    )
    serve.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help=f"an admin API key clients send as 'Authorization: Bearer KEY' (repeatable; also ${KEY_VARIABLE}, "
        "which other users of the machine cannot read from the process list)",
    )
    serve.add_argument(
        "--api-key-file",
        type=input_file,
        help="API keys with their roles, 'KEY ROLE' a line; a role is chat (ask), feedback (ask and judge "
        "answers) or admin (also /v1/stats, /metrics, /docs)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a name clients reach the server by, checked against each request's Host header (repeatable; "
        "default on loopback: 127.0.0.1, localhost and ::1; elsewhere: any)",
    )
    serve.add_argument(
        "--allow-network-without-keys",
        action="store_true",
        help="listen on another address than loopback with no API key (anyone who reaches it may ask and teach "
        "the gate)",
    )
    serve.add_argument(
        "--lesson-quorum",
        type=positive_int,
        default=2,
        metavar="N",
        help="a verdict teaches the gate once verdicts agreeing with it (same question, route and verdict) come "
        "from N distinct API keys, or one from an admin key; until then it is pending (default 2; without keys "
        "every verdict is the operator's and teaches at once)",
    )
    serve.add_argument(
        "--share-evidence",
        action="store_true",
        help="show every key the past questions other keys taught through feedback among an answer's nearest "
        "questions (the page draws only their label); by default their text is left out",
    )
    serve.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        type=ip_address_or_network,
        metavar="ADDR",
        help="the address (or network) of a reverse proxy in front of the server, whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed (repeatable); from any other peer, and by default from every peer, "
        "they are ignored: the client's address (its rate limit and feedback quota without keys, the access "
        "log) is the connection's",
    )
    serve.add_argument(
        "--no-access-log",
        action="store_true",
        help="print no line per request (the line holds the address, the key's id, the path, the status and the time; "
        "never a question)",
    )
    _add_limits(serve)
    serve.set_defaults(run=run)


def _add_limits(serve: argparse.ArgumentParser) -> None:
    """The bounds on what a request and a client may cost: a flag for each field of
    ``Limits`` (its metadata), and how long answers under way get when the server stops."""
    limits = serve.add_argument_group("limits", "what one request, or one client, may cost")
    for bound in dataclasses.fields(Limits):
        default = bound.default if bound.default is not None else bound.metadata["command_default"]
        limits.add_argument(
            bound.metadata["flag"],
            type=positive_int if bound.default is not None else non_negative_int,
            default=default,
            help=f"{bound.metadata['help']} (default {default})",
        )
    limits.add_argument(
        "--drain-seconds",
        type=seconds,
        default=DEFAULT_DRAIN_SECONDS,
        help="on SIGTERM or Ctrl-C, how long answers under way may take to finish before they are cut "
        f"(default {DEFAULT_DRAIN_SECONDS:g})",
    )


def limits_from(args: argparse.Namespace) -> Limits:
    """The ``Limits`` the flags set (0, for a bound that may be off: off)."""
    values: dict[str, Any] = {}
    for bound in dataclasses.fields(Limits):
        value = getattr(args, bound.metadata["flag"].removeprefix("--").replace("-", "_"))
        values[bound.name] = (value or None) if bound.default is None else value
    return Limits(**values)


def run(args: argparse.Namespace) -> int:
    from ..models.optional import require

    for module in ("fastapi", "uvicorn", "prometheus_client"):
        require(module, extra="serve")  # a missing one is named with its extra, before any work
    from ..serve.app import create_app
    from ..serve.server import AnnouncingServer

    # before any work: a bad key file or an open address without keys ends here, then
    # what would fail only after the loading
    keys = api_keys(args)
    check_before_loading(args)
    say_who_may_ask(keys, args.host)
    started = time.perf_counter()
    service = build_service(args)
    corpus = f"{len(service.retriever)} passages" if isinstance(service.retriever, Sized) else "the corpus"
    say(f"{service.gate.name} gate over {service.model_id}, {corpus}: ready in {time.perf_counter() - started:.0f} s")
    app = create_app(service, keys, allowed_hosts(args))
    if not args.no_access_log:
        _print_access_log()
    AnnouncingServer(server_config(app, args), _listening).run()
    return 0


def server_config(app: Any, args: argparse.Namespace) -> uvicorn.Config:
    """uvicorn's settings for ``app`` as the flags give them. Forwarding headers are read
    only from a ``--trusted-proxy`` peer: uvicorn otherwise believes them from
    127.0.0.1, where any local client could then pose as any address."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=math.ceil(args.drain_seconds),
        proxy_headers=bool(args.trusted_proxy),
        forwarded_allow_ips=list(args.trusted_proxy),
    )


def check_before_loading(args: argparse.Namespace) -> None:
    """What would fail only after minutes of loading, tried now: that the server can
    listen at ``--host``/``--port``, and, when feedback is saved over ``--gate``, that
    the gate's folder takes the new directory and holds nothing but the gate, and that
    the lessons kept beside it can be read."""
    from ..bundled.shipped import is_pretrained
    from ..persistence.saved_format import check_save_target
    from ..persistence.writable import check_creatable
    from ..serve.build import lessons_file
    from ..serve.records import LessonLog
    from ..serve.server import check_can_listen

    try:
        check_can_listen(args.host, args.port)
    except OSError as exc:
        raise UsageError(f"--host {args.host} --port {args.port}: {exc}") from None
    if args.no_save or args.milvus_uri is not None or is_pretrained(args.gate):
        return  # nothing is saved over --gate
    try:
        check_save_target(args.gate, overwrite=True)
    except FileExistsError as exc:
        raise UsageError(f"--gate {exc}, as feedback saves over it; or give --no-save") from None
    try:
        check_creatable(args.gate)
    except OSError as exc:
        raise UsageError(f"--gate {args.gate}: feedback saves over it, but {exc}; or give --no-save") from None
    try:
        LessonLog.load(lessons_file(args.gate))  # the lessons kept beside it, read at start
    except ValueError as exc:
        raise UsageError(f"--gate {args.gate}: the lessons kept beside it cannot be read: {exc}") from None


def say(message: str) -> None:
    """A line of the server's progress on stderr, whatever the log level: a server that
    works for minutes before it listens says so."""
    print(f"adaptive-gates serve: {message}", file=sys.stderr, flush=True)


def _listening(url: str) -> None:
    say(f"listening on {url}: the chat page at {url}/, the OpenAI-compatible API at {url}/v1")


class _AccessLogHandler(logging.StreamHandler):
    """The handler ``serve`` prints its access log through."""


def _print_access_log() -> None:
    """The access log (``serve.access_log``) on stderr, one line a request; attached
    when the server starts, to the stderr it starts with."""
    access = logging.getLogger("adaptive_gates.serve.access")
    if any(isinstance(h, _AccessLogHandler) for h in access.handlers):
        return  # a second server in this process prints through the first one's
    handler = _AccessLogHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False  # once, also with --verbose


def api_keys(args: argparse.Namespace) -> KeyRing:
    """The server's keys. Without any, only a loopback address is served, unless the
    user says ``--allow-network-without-keys``."""
    try:
        keys = KeyRing.from_sources(args.api_key, args.api_key_file)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not keys and not _is_loopback(args.host) and not args.allow_network_without_keys:
        raise UsageError(
            f"--host {args.host} is reachable from other machines: give API keys (--api-key, --api-key-file or "
            f"${KEY_VARIABLE}), or say --allow-network-without-keys"
        )
    return keys


def say_who_may_ask(keys: KeyRing, host: str) -> None:
    """Log who can reach the server, once every check has passed."""
    if keys:
        logger.info("%d API key(s): every route but the page and /healthz needs one", len(keys))
    elif _is_loopback(host):
        logger.warning("no API key: serving %s only, where anyone on this machine may ask and teach", host)
    else:
        logger.warning("no API key on %s: anyone who reaches it may ask and teach the gate", host)


def allowed_hosts(args: argparse.Namespace) -> list[str] | None:
    """The names requests may give in ``Host`` (``None``: any). A loopback server answers
    only to loopback names unless told others: a web page cannot then reach it through
    a name of its own that resolves to 127.0.0.1."""
    if args.allowed_host:
        return list(args.allowed_host)
    return list(dict.fromkeys([*LOOPBACK_NAMES, args.host])) if _is_loopback(args.host) else None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any address


def build_service(args: argparse.Namespace) -> ChatService:
    """The service the arguments describe (``serve.build``): every input loaded and
    checked before the server listens."""
    from ..serve.build import build_service as build

    if args.max_tokens > args.max_answer_tokens:
        raise UsageError(f"--max-tokens {args.max_tokens} is more than --max-answer-tokens {args.max_answer_tokens}")
    return build(
        gate=args.gate,
        chat=_upstream(args),
        retriever=args.retriever,
        corpus=args.corpus,
        limits=limits_from(args),
        k=args.k,
        history_window=args.history_window,
        max_tokens=args.max_tokens,
        upstream_timeout=args.upstream_timeout,
        model_names=args.model_name or (),
        domain=args.domain,
        save=not args.no_save,
        shadow_rate=args.shadow_rate,
        shadow_refit_every=args.shadow_refit_every,
        milvus_uri=args.milvus_uri,
        lesson_quorum=args.lesson_quorum,
        share_evidence=args.share_evidence,
        state_url=args.state_url,
        gate_backends=lambda chat, embedder, retriever: served_backends(Served(chat, embedder, retriever)),
        progress=say,
    )


def _upstream(args: argparse.Namespace) -> ChatModel | None:
    """The answering LLM: the OpenAI-compatible server named, or the embedded model."""
    if (args.upstream_base_url is None) != (args.upstream_model is None):
        raise UsageError("--upstream-base-url and --upstream-model go together")
    if args.upstream_model is None:
        if args.upstream_api_key_env:
            raise UsageError("--upstream-api-key-env goes with --upstream-base-url")
        return None  # the embedded model
    from ..models.chat.openai_chat import OpenAIChatModel

    return OpenAIChatModel(
        args.upstream_model,
        base_url=args.upstream_base_url,
        api_key=api_key(args.upstream_api_key_env, "--upstream-api-key-env"),
        timeout=args.upstream_timeout,
        max_retries=1,
    )
