"""``adaptive-gates serve``: an OpenAI-compatible chat server that retrieves only when
its gate says so, with a page at ``/`` that shows every decision.

The gate is loaded from its directory, the corpus' passages are indexed in process
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
import functools
import hashlib
import ipaddress
import logging
import math
import sys
import time
from collections.abc import Callable, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..gates.shadow.learner import DEFAULT_REFIT_EVERY
from ..serve.guards import LOOPBACK_NAMES
from ..serve.keys import KEY_VARIABLE, KeyRing
from ..serve.limits import Limits
from .arguments import base_url, non_negative_int, port, positive_int, seconds, share
from .backends import Served, api_key, served_backends
from .files import input_file, saved_gate

if TYPE_CHECKING:
    from ..gates.base.gate import Gate
    from ..models.chat.base import ChatModel
    from ..models.protocols import Embedder
    from ..retrieval.base import Retriever
    from ..serve.service import ChatService
    from ..serve.shadow import ServedShadowLearner

logger = logging.getLogger(__name__)

#: The gate served when none is named: one the package ships, fitted.
DEFAULT_GATE = "pretrained:draft-check"

#: Requests a minute a key (or an address) may send, unless told otherwise.
DEFAULT_RATE_LIMIT = 120
#: Verdicts an hour a key (or an address) may give, unless told otherwise.
DEFAULT_FEEDBACK_PER_HOUR = 60
#: Seconds answers under way get to finish when the server is told to stop.
DEFAULT_DRAIN_SECONDS = 10.0

#: Question vectors the server keeps (a few MB): the retrieval after a decision, and
#: questions asked again, reuse them.
QUERY_MEMO = 4096


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
        help="a model name clients may ask for (repeatable; others get 404 model_not_found); default: the "
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
        "--max-tokens", type=positive_int, default=128, help="answer length when a request sets none (default 128)"
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
        "--no-access-log",
        action="store_true",
        help="print no line per request (the line holds the address, the key's id, the path, the status and the time; "
        "never a question)",
    )
    _add_limits(serve)
    serve.set_defaults(run=run)


def _add_limits(serve: argparse.ArgumentParser) -> None:
    """The bounds on what a request and a client may cost (``serve.limits``)."""
    defaults = Limits()
    limits = serve.add_argument_group("limits", "what one request, or one client, may cost")
    limits.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=defaults.max_body_bytes,
        help=f"the largest request body; larger gets 413 (default {defaults.max_body_bytes})",
    )
    limits.add_argument(
        "--max-message-tokens",
        type=positive_int,
        default=defaults.max_message_tokens,
        help="the longest message, in the answering model's tokens (estimated at 3 bytes a token for a remote "
        f"one); longer gets 400 context_length_exceeded (default {defaults.max_message_tokens})",
    )
    limits.add_argument(
        "--max-conversation-tokens",
        type=positive_int,
        default=defaults.max_conversation_tokens,
        help=f"the longest conversation, every message counted (default {defaults.max_conversation_tokens})",
    )
    limits.add_argument(
        "--max-answer-tokens",
        type=positive_int,
        default=defaults.max_answer_tokens,
        help="the most tokens a request may ask an answer to be (max_tokens); more gets 400, and --max-tokens "
        f"may not be more (default {defaults.max_answer_tokens})",
    )
    limits.add_argument(
        "--max-in-flight",
        type=positive_int,
        default=defaults.max_in_flight,
        help=f"chat requests answered at once; more get 503 with Retry-After (default {defaults.max_in_flight})",
    )
    limits.add_argument(
        "--rate-limit",
        type=non_negative_int,
        default=DEFAULT_RATE_LIMIT,
        help="requests a minute an API key (without keys: a client address) may send to /v1/, in bursts up to "
        f"as many; more get 429 with Retry-After; 0: no limit (default {DEFAULT_RATE_LIMIT})",
    )
    limits.add_argument(
        "--feedback-per-hour",
        type=non_negative_int,
        default=DEFAULT_FEEDBACK_PER_HOUR,
        help="verdicts an API key (without keys: a client address) may give an hour; more get 429; 0: no limit "
        f"(default {DEFAULT_FEEDBACK_PER_HOUR})",
    )
    limits.add_argument(
        "--drain-seconds",
        type=seconds,
        default=DEFAULT_DRAIN_SECONDS,
        help="on SIGTERM or Ctrl-C, how long answers under way may take to finish before they are cut "
        f"(default {DEFAULT_DRAIN_SECONDS:g})",
    )


def run(args: argparse.Namespace) -> int:
    from ..models.optional import require

    for module in ("fastapi", "uvicorn", "prometheus_client"):
        require(module, extra="serve")  # a missing one is named with its extra, before any work
    import uvicorn

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
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=math.ceil(args.drain_seconds),
    )
    if not args.no_access_log:
        _print_access_log()
    AnnouncingServer(config, _listening).run()
    return 0


def check_before_loading(args: argparse.Namespace) -> None:
    """What would fail only after minutes of loading, tried now: that the server can
    listen at ``--host``/``--port``, and, when feedback is saved over ``--gate``, that
    the gate's folder takes the new directory and holds nothing but the gate."""
    from ..bundled.shipped import is_pretrained
    from ..persistence.saved_format import check_save_target
    from ..persistence.writable import check_creatable
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
    """The service the arguments describe: every input loaded and checked before the
    server listens."""
    from ..bundled.shipped import is_pretrained, pretrained_notice
    from ..milvus.client import milvus_client
    from ..models.defaults import default_embedder
    from ..models.embedding.cached import CachedEmbedder
    from ..serve.service import ChatService

    if args.max_tokens > args.max_answer_tokens:
        raise UsageError(f"--max-tokens {args.max_tokens} is more than --max-answer-tokens {args.max_answer_tokens}")
    upstream = _upstream(args)
    # The database is reached, and the gate's directory read, before any model loads: a
    # wrong address or directory fails at once.
    database = None if args.milvus_uri is None else milvus_client(args.milvus_uri)
    gate_type = _saved_gate_type(args.gate)
    if database is not None:
        _check_memory_gate(args.gate, gate_type)  # before the corpus is indexed in the database
    corpus = args.corpus or "of the package's Wikipedia paragraphs"
    say(f"loading the {gate_type} gate and the models, indexing the corpus {corpus} ...")
    # One memo for the gate and the retriever: a question the gate embedded is searched
    # with the same vector, and a question asked again is not embedded again.
    embedder = CachedEmbedder(default_embedder(), max_entries=QUERY_MEMO)
    retriever = _retriever(args, embedder, database)
    served = served_backends(Served(chat=upstream, embedder=embedder, retriever=retriever))
    gate = _load_gate(args.gate, gate_type, served)
    if is_pretrained(args.gate):  # whose outcomes it holds, against the model it now serves
        say(pretrained_notice(args.gate.name, upstream.model_id))
    if args.domain is not None:
        _serve_domain(gate, args.domain, args.gate)
    if database is None:
        # what feedback taught is saved over the gate's directory, for the next start (a
        # shipped gate's directory is the package's own: never written)
        keep = args.no_save or is_pretrained(args.gate)
        after_feedback = None if keep else functools.partial(gate.save, args.gate, overwrite=True)
    else:
        _memory_in_milvus(gate, database, args)
        after_feedback = None  # the database holds what feedback teaches
    return ChatService(
        gate,
        retriever,
        upstream,
        shadow=_shadow_learner(gate, upstream, args, after_feedback),
        k=args.k,
        history_window=args.history_window,
        max_tokens=args.max_tokens,
        upstream_timeout=args.upstream_timeout,
        after_feedback=after_feedback,
        model_names=args.model_name or (),
        limits=Limits(
            max_body_bytes=args.max_body_bytes,
            max_message_tokens=args.max_message_tokens,
            max_conversation_tokens=args.max_conversation_tokens,
            max_answer_tokens=args.max_answer_tokens,
            max_in_flight=args.max_in_flight,
            requests_per_minute=args.rate_limit or None,
            feedback_per_hour=args.feedback_per_hour or None,
        ),
    )


def _shadow_learner(
    gate: Gate, upstream: ChatModel, args: argparse.Namespace, save: Callable[[], object] | None
) -> ServedShadowLearner | None:
    """The learner of ``--shadow-rate`` (``None`` without it), saving the gate after
    each refit as after feedback; refused for a gate that cannot learn so."""
    from ..gates.shadow.learning import LearnsFromShadows
    from ..serve.shadow import ServedShadowLearner

    if args.shadow_rate is None:
        return None
    if not isinstance(gate, LearnsFromShadows):
        raise UsageError(f"--shadow-rate: a draft-check gate learns from served pairs; --gate holds a {gate.name} gate")
    if gate.logprob_features:
        raise UsageError("--shadow-rate: this gate reads the draft's log-probabilities, which decisions do not keep")
    return ServedShadowLearner(
        gate, upstream, rate=args.shadow_rate, refit_every=args.shadow_refit_every, after_learning=save
    )


def _retriever(args: argparse.Namespace, embedder: Embedder, database: Any) -> Retriever:
    """The corpus' retriever: dense over ``embedder`` (in Milvus with ``--milvus-uri``),
    or BM25 (the default for the shipped draft-check gate, fitted with it)."""
    from ..bundled.datasets import adarague_corpus
    from ..bundled.shipped import pretrained_path
    from ..records.data import load_corpus
    from ..retrieval import BM25Retriever, DenseRetriever

    kind = args.retriever or ("bm25" if args.gate == pretrained_path("draft-check") else "dense")
    if kind == "bm25" and database is not None:
        raise UsageError("--milvus-uri keeps a dense index of the corpus; it does not go with --retriever bm25")
    records = adarague_corpus() if args.corpus is None else load_corpus(args.corpus)
    if kind == "bm25":
        return BM25Retriever.from_records(records)
    if database is None:
        return DenseRetriever.from_records(records, embedder)
    from ..milvus.retrieval import MilvusRetriever

    name = "corpus_" + ("adarague" if args.corpus is None else _digest(args.corpus))
    return MilvusRetriever.from_records(records, embedder, database, name)


def _check_memory_gate(directory: Path, gate_type: str) -> None:
    """Refuse ``--milvus-uri`` for a saved gate (of ``gate_type``) that holds no SKR-kNN memory."""
    from ..gates.base.gate import Gate
    from ..gates.skr import SKRKnnGate

    if not issubclass(Gate.gate_class(gate_type), SKRKnnGate):
        raise UsageError(f"--milvus-uri keeps an SKR-kNN gate's memory; --gate {directory} holds a {gate_type} gate")


def _memory_in_milvus(gate: Gate, database: Any, args: argparse.Namespace) -> None:
    """Move the gate onto its memory in Milvus (filled from the gate by the first server)."""
    from ..gates.skr import SKRKnnGate
    from ..milvus.memory import MilvusMemory
    from ..persistence.saved_format import CONFIG_FILE

    if not isinstance(gate, SKRKnnGate):
        raise UsageError(f"--milvus-uri keeps an SKR-kNN gate's memory; --gate {args.gate} holds a {gate.name} gate")
    memory_name = "skr_" + _digest(args.gate / CONFIG_FILE)
    gate.attach_memory(MilvusMemory(database, memory_name, gate.memory_.dimension))


def _digest(path: Path) -> str:
    """A short name for what ``path`` holds."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _load_gate(directory: Path, gate_type: str, backends: dict[str, Any]) -> Gate:
    """The saved gate (of ``gate_type``) with those of ``backends`` it takes (the
    upstream as its chat model if it asks an LLM: a verbalized gate's draft answers then
    come from the model that answers)."""
    from ..gates.base.gate import Gate
    from ..gates.base.saved import member_backends

    return Gate.load(directory, **member_backends(Gate.gate_class(gate_type), backends))


def _serve_domain(gate: Gate, domain: str, directory: Path) -> None:
    """Set the domain a gate fitted with a domain indicator reads its questions as (a
    serving parameter: the fitted gate stays as it is)."""
    if "domain" not in gate.param_names() or getattr(gate, "domains_", None) is None:
        raise UsageError(f"--domain: the {gate.name} gate at {directory} was not fitted with a domain indicator")
    try:
        gate.set_params(domain=domain)
    except ValueError as exc:
        raise UsageError(f"--domain {domain!r}: {exc}") from None
    known = gate.domains_  # type: ignore[attr-defined]  # checked above
    if domain not in known:
        say(f"--domain {domain!r} is none of the domains the gate was fitted on ({', '.join(known)}): read as 'other'")


def _saved_gate_type(directory: Path) -> str:
    """The registered gate type of the gate saved in ``directory``."""
    from ..gates.base.gate import Gate
    from ..persistence.saved_format import config_field, read_config

    gate_type = config_field(read_config(directory), "gate_type", str)
    if gate_type not in Gate.gate_names():
        raise UsageError(f"--gate {directory}: field 'gate_type' is {gate_type!r}, which is no known gate")
    return gate_type


def _upstream(args: argparse.Namespace) -> ChatModel:
    """The answering LLM: the OpenAI-compatible server named, or the embedded model."""
    if (args.upstream_base_url is None) != (args.upstream_model is None):
        raise UsageError("--upstream-base-url and --upstream-model go together")
    if args.upstream_model is None:
        if args.upstream_api_key_env:
            raise UsageError("--upstream-api-key-env goes with --upstream-base-url")
        from ..models.chat.local import LocalChatModel

        return LocalChatModel()
    from ..models.chat.openai_chat import OpenAIChatModel

    return OpenAIChatModel(
        args.upstream_model,
        base_url=args.upstream_base_url,
        api_key=api_key(args.upstream_api_key_env, "--upstream-api-key-env"),
        timeout=args.upstream_timeout,
        max_retries=1,
    )
