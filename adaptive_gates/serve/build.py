"""Assemble the chat service from typed parameters: what ``adaptive-gates serve`` runs,
for a program that serves from Python (``create_app(build_service(...))``, mounted in
its own ASGI app or run by uvicorn).

The gate is a fitted ``Gate`` or loaded from its directory (``pretrained:<name>`` for a
gate the package ships), the corpus' passages are indexed in process (embedded into
faiss, or BM25) unless a retriever is given, and the upstream LLM is the chat model
given or the embedded one. What feedback teaches a loaded gate is saved back to its
directory (``save=False`` keeps it as it is). With ``milvus_uri`` the SKR memory and the
corpus live in Milvus, shared by every server pointed at it; each collection is named
after what it holds (the gate's saved config, the corpus file).

The errors name each parameter as the command line spells it (``--domain`` for
``domain``), since the command reports them as they are.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import UsageError
from ..gates.shadow.learner import DEFAULT_REFIT_EVERY
from .limits import Limits

if TYPE_CHECKING:
    from ..gates.base.gate import Gate
    from ..models.chat.base import ChatModel
    from ..models.protocols import Embedder
    from ..retrieval.base import Retriever
    from .records import LessonLog
    from .service import ChatService
    from .shadow import ServedShadowLearner
    from .state import RedisState

__all__ = ["DEFAULT_GATE", "LESSONS_SUFFIX", "QUERY_MEMO", "GateBackends", "build_service", "lessons_file"]

#: The gate served when none is named: one the package ships, fitted.
DEFAULT_GATE = "pretrained:draft-check"

#: Question vectors the server keeps (a few MB): the retrieval after a decision, and
#: questions asked again, reuse them.
QUERY_MEMO = 4096

#: The name a gate's lessons file adds to the gate's directory name.
LESSONS_SUFFIX = ".lessons.jsonl"

#: What a loaded gate is given of the server's own backends, by the gate parameter
#: each fills: from the answering chat model, the embedder and the corpus' retriever.
GateBackends = Callable[["ChatModel", "Embedder | None", "Retriever"], Mapping[str, Any]]


def _server_backends(chat: ChatModel, embedder: Embedder | None, retriever: Retriever) -> Mapping[str, Any]:
    return {"chat": chat, "embedder": embedder, "retriever": retriever}


def build_service(
    *,
    gate: Gate | str | Path = DEFAULT_GATE,
    chat: ChatModel | None = None,
    retriever: Retriever | Literal["dense", "bm25"] | None = None,
    corpus: str | Path | None = None,
    limits: Limits | None = None,
    k: int = 3,
    history_window: int = 2,
    max_tokens: int = 128,
    upstream_timeout: float = 60.0,
    model_names: Sequence[str] = (),
    domain: str | None = None,
    save: bool = True,
    shadow_rate: float | None = None,
    shadow_refit_every: int = DEFAULT_REFIT_EVERY,
    milvus_uri: str | None = None,
    lesson_quorum: int = 2,
    share_evidence: bool = False,
    state_url: str | None = None,
    gate_backends: GateBackends = _server_backends,
    progress: Callable[[str], object] | None = None,
) -> ChatService:
    """A ``ChatService`` with every input loaded and checked.

    Args:
        gate: a fitted gate, or the directory of a saved one (``"pretrained:draft-check"``
            or ``"pretrained:stacked"``: one the package ships).
        chat: the LLM that answers (e.g. an ``OpenAIChatModel``); default: the embedded
            SmolLM2. A loaded gate that asks an LLM asks this one.
        retriever: the corpus' retriever, or how to index ``corpus``: ``"dense"`` (over
            the embedded MiniLM) or ``"bm25"``; default: BM25 for the shipped
            draft-check gate (as it was fitted), dense otherwise.
        corpus: the corpus records (JSONL: id, title, text) to index; default: the
            Wikipedia paragraphs the package's AdaRAGUE records carry.
        limits: what one request, or one client, may cost (``serve.limits``).
        k: passages retrieved when the gate says retrieve.
        history_window: earlier user questions a follow-up may lean on.
        max_tokens: the answer length when a request sets none.
        upstream_timeout: seconds to wait for the upstream's reply.
        model_names: the model names requests may ask for; default: the upstream's.
        domain: the domain of the questions served, for a gate fitted with a domain
            indicator.
        save: save what feedback (and shadow learning) teaches a loaded gate back to
            its directory (never a shipped gate's).
        shadow_rate: a draft-check gate learns the upstream from what it serves
            (``serve.shadow``); ``None``: off.
        shadow_refit_every: pairs between refits with ``shadow_rate``.
        milvus_uri: keep the SKR memory (of a gate loaded from its directory) and a
            dense corpus index in Milvus at this URI.
        lesson_quorum: distinct keys whose agreeing verdicts on a question teach the
            gate (an admin key's teaches at once).
        share_evidence: neighbours of the evidence that other keys taught through
            feedback keep their text.
        state_url: keep the decision book, the lessons, the feedback quotas and the
            rate limits in Redis at this URL (``redis://HOST:PORT/DB``), shared by every
            server given it (``serve.state``); the lessons are then kept there, not
            beside the gate. Default: in this process.
        gate_backends: what a loaded gate is given of the server's backends (the
            answering model, the embedder, the retriever), by its parameter names. The
            embedder is ``None`` where nothing embeds (a BM25 retriever and a gate that
            takes no embedder).
        progress: called with a line of progress while loading.

    Raises:
        UsageError: parameters that do not go together, or a gate that cannot be served
            as asked.
    """
    from ..bundled.shipped import gate_location, is_pretrained, pretrained_notice
    from ..gates.base.gate import Gate
    from ..milvus.client import milvus_client
    from ..models.defaults import default_embedder
    from ..models.embedding.cached import CachedEmbedder
    from .service import ChatService

    say = progress or (lambda message: None)
    limits = limits or Limits()
    if max_tokens > limits.max_answer_tokens:  # refused before minutes of loading
        raise UsageError(f"--max-tokens {max_tokens} is more than --max-answer-tokens {limits.max_answer_tokens}")
    upstream = chat if chat is not None else _embedded_chat()
    directory = None if isinstance(gate, Gate) else gate_location(gate) if isinstance(gate, str) else Path(gate)
    corpus = None if corpus is None else Path(corpus)
    # The database is reached, and the gate's directory read, before any model loads: a
    # wrong address or directory fails at once.
    database = None if milvus_uri is None else milvus_client(milvus_uri)
    state = None if state_url is None else _shared_state(state_url)
    if isinstance(gate, Gate):
        gate_type = gate.name
    else:
        assert directory is not None
        gate_type = _saved_gate_type(directory)
    if database is not None:
        if directory is None:
            raise UsageError("--milvus-uri keeps the memory of a gate loaded from its directory; give --gate as one")
        _check_memory_gate(directory, gate_type)  # before the corpus is indexed in the database
    what = f"the {gate_type} gate and the models" if directory is not None else "the models"
    indexed = corpus or "of the package's Wikipedia paragraphs"
    say(f"loading {what}, indexing the corpus {indexed} ...")
    # A line as each step starts and one as it ends: a gate that loads for minutes
    # (pretrained:stacked) says what it is doing meanwhile.
    embedder: Embedder | None = None
    # Built only where something embeds (a dense retriever, a gate that takes an
    # embedder): a BM25 server with a popularity gate needs no embedding model, nor its
    # weight package.
    if _embeds(retriever, directory, gate, gate_type):
        with _step(say, "loading the embedding model"):
            # One memo for the gate and the retriever: a question the gate embedded is
            # searched with the same vector, and a question asked again is not embedded again.
            embedder = CachedEmbedder(default_embedder(), max_entries=QUERY_MEMO)
    indexing = retriever is None or isinstance(retriever, str)  # a retriever given holds its corpus
    with _step(say, f"indexing the corpus {indexed}") if indexing else contextlib.nullcontext():
        searcher = _retriever(retriever, corpus, directory, embedder, database)
    if isinstance(gate, Gate):
        served_gate = gate
    else:
        assert directory is not None
        with _step(say, f"loading the {gate_type} gate (and the models it asks)"):
            served_gate = _load_gate(directory, gate_type, gate_backends(upstream, embedder, searcher))
        if is_pretrained(directory):  # whose outcomes it holds, against the model it now serves
            say(pretrained_notice(directory.name, upstream.model_id))
    if domain is not None:
        _serve_domain(served_gate, domain, directory, say)
    after_feedback: Callable[[], object] | None = None
    lessons: LessonLog | None = None
    if database is not None:
        assert directory is not None
        _memory_in_milvus(served_gate, database, directory)  # the database holds what feedback teaches
    elif directory is not None and save and not is_pretrained(directory):
        # saved over the gate's directory, for the next start (a shipped gate's
        # directory is the package's own: never written)
        after_feedback = functools.partial(served_gate.save, directory, overwrite=True)
        lessons = _lessons(directory) if state is None else None
    shadow = _shadow_learner(served_gate, upstream, shadow_rate, shadow_refit_every, after_feedback)
    return ChatService(
        served_gate,
        searcher,
        upstream,
        shadow=shadow,
        k=k,
        history_window=history_window,
        max_tokens=max_tokens,
        upstream_timeout=upstream_timeout,
        after_feedback=after_feedback,
        model_names=model_names,
        limits=limits,
        lesson_quorum=lesson_quorum,
        share_evidence=share_evidence,
        lessons=lessons,
        state=state,
    )


def lessons_file(directory: Path) -> Path:
    """Where the lessons taught to the gate saved in ``directory`` are kept: beside it
    (``GATE.lessons.jsonl``), since a save swaps the gate's directory in whole."""
    return directory.with_name(directory.name + LESSONS_SUFFIX)


def _lessons(directory: Path) -> LessonLog:
    """The lessons persisted beside the gate saved in ``directory``, written there on."""
    from .records import LessonLog

    path = lessons_file(directory)
    try:
        return LessonLog.load(path)
    except ValueError as exc:
        raise UsageError(f"--gate {directory}: the lessons kept beside it cannot be read: {exc}") from None


@contextlib.contextmanager
def _step(say: Callable[[str], object], what: str) -> Iterator[None]:
    """Say ``what`` is under way, then that it is done and how long it took."""
    say(f"{what} ...")
    started = time.perf_counter()
    yield
    say(f"{what}: done in {time.perf_counter() - started:.0f} s")


def _shared_state(url: str) -> RedisState:
    """The state store at ``url``, reached once before anything loads."""
    from ..errors import StateStoreUnavailableError
    from .state import RedisState

    state = RedisState.from_url(url)
    try:
        state.ping()
    except StateStoreUnavailableError:
        raise UsageError("--state-url: the Redis it names does not answer; start it, or check the URL") from None
    return state


def _embedded_chat() -> ChatModel:
    from ..models.chat.local import LocalChatModel

    return LocalChatModel()


def _shadow_learner(
    gate: Gate, upstream: ChatModel, rate: float | None, refit_every: int, save: Callable[[], object] | None
) -> ServedShadowLearner | None:
    """The learner of ``rate`` (``None`` without it), saving the gate after each refit as
    after feedback; refused for a gate that cannot learn so."""
    from ..gates.shadow.learning import LearnsFromShadows
    from .shadow import ServedShadowLearner

    if rate is None:
        return None
    if not isinstance(gate, LearnsFromShadows):
        raise UsageError(f"--shadow-rate: a draft-check gate learns from served pairs; --gate holds a {gate.name} gate")
    if gate.logprob_features:
        raise UsageError("--shadow-rate: this gate reads the draft's log-probabilities, which decisions do not keep")
    return ServedShadowLearner(gate, upstream, rate=rate, refit_every=refit_every, after_learning=save)


def _retriever_kind(given: Retriever | str | None, directory: Path | None) -> str | None:
    """The kind of retriever made for the corpus: ``given``'s name, else BM25 for the
    shipped draft-check gate (fitted with it) and dense otherwise; ``None`` for a
    retriever given whole."""
    from ..bundled.shipped import pretrained_path

    if given is not None and not isinstance(given, str):
        return None
    return given or ("bm25" if directory == pretrained_path("draft-check") else "dense")


def _embeds(retriever: Retriever | str | None, directory: Path | None, gate: object, gate_type: str) -> bool:
    """Whether the server needs an embedder: for a dense retriever, or for a saved gate
    that takes one (or holds members, which may)."""
    from ..gates.base.gate import Gate

    if _retriever_kind(retriever, directory) == "dense":
        return True
    if isinstance(gate, Gate) or directory is None:
        return False
    loaded = Gate.gate_class(gate_type)
    return bool(loaded.member_params) or "embedder" in loaded.backend_params


def _retriever(
    given: Retriever | str | None,
    corpus: Path | None,
    directory: Path | None,
    embedder: Embedder | None,
    database: Any,
) -> Retriever:
    """The corpus' retriever: the one given, or dense over ``embedder`` (in Milvus with
    a database), or BM25 (the default for the shipped draft-check gate, fitted with it)."""
    from ..bundled.datasets import adarague_corpus
    from ..records.data import load_corpus
    from ..retrieval import BM25Retriever, DenseRetriever

    if given is not None and not isinstance(given, str):
        if corpus is not None:
            raise UsageError("--corpus is indexed by the retriever made for it; a retriever given holds its own")
        return given
    if given not in (None, "dense", "bm25"):
        raise UsageError(f"--retriever {given!r}: expected 'dense' or 'bm25'")
    kind = _retriever_kind(given, directory)
    if kind == "bm25" and database is not None:
        raise UsageError("--milvus-uri keeps a dense index of the corpus; it does not go with --retriever bm25")
    records = adarague_corpus() if corpus is None else load_corpus(corpus)
    if kind == "bm25":
        return BM25Retriever.from_records(records)
    assert embedder is not None  # built for a dense retriever (_embeds)
    if database is None:
        return DenseRetriever.from_records(records, embedder)
    from ..milvus.retrieval import MilvusRetriever

    name = "corpus_" + ("adarague" if corpus is None else _digest(corpus))
    return MilvusRetriever.from_records(records, embedder, database, name)


def _check_memory_gate(directory: Path, gate_type: str) -> None:
    """Refuse Milvus for a saved gate (of ``gate_type``) that holds no SKR-kNN memory."""
    from ..gates.base.gate import Gate
    from ..gates.skr import SKRKnnGate

    if not issubclass(Gate.gate_class(gate_type), SKRKnnGate):
        raise UsageError(f"--milvus-uri keeps an SKR-kNN gate's memory; --gate {directory} holds a {gate_type} gate")


def _memory_in_milvus(gate: Gate, database: Any, directory: Path) -> None:
    """Move the gate onto its memory in Milvus (filled from the gate by the first server)."""
    from ..gates.skr import SKRKnnGate
    from ..milvus.memory import MilvusMemory
    from ..persistence.saved_format import CONFIG_FILE

    if not isinstance(gate, SKRKnnGate):
        raise UsageError(f"--milvus-uri keeps an SKR-kNN gate's memory; --gate {directory} holds a {gate.name} gate")
    memory_name = "skr_" + _digest(directory / CONFIG_FILE)
    gate.attach_memory(MilvusMemory(database, memory_name, gate.memory_.dimension))


def _digest(path: Path) -> str:
    """A short name for what ``path`` holds."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _load_gate(directory: Path, gate_type: str, backends: Mapping[str, Any]) -> Gate:
    """The saved gate (of ``gate_type``) with those of ``backends`` it takes (the
    upstream as its chat model if it asks an LLM: a verbalized gate's draft answers then
    come from the model that answers)."""
    from ..gates.base.gate import Gate
    from ..gates.base.saved import member_backends

    return Gate.load(directory, **member_backends(Gate.gate_class(gate_type), dict(backends)))


def _serve_domain(gate: Gate, domain: str, directory: Path | None, say: Callable[[str], object]) -> None:
    """Set the domain a gate fitted with a domain indicator reads its questions as (a
    serving parameter: the fitted gate stays as it is)."""
    if "domain" not in gate.param_names() or getattr(gate, "domains_", None) is None:
        where = "" if directory is None else f" at {directory}"
        raise UsageError(f"--domain: the {gate.name} gate{where} was not fitted with a domain indicator")
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
