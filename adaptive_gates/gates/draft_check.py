"""Answer, look, then decide: the LLM drafts an answer without retrieval, one cheap
retrieval checks it, and a fitted combiner reads both (docs/draft_check_gate.md).

This gate is ours, not a paper's. Its signals are those of
``adaptive_gates.signals.draft`` (the draft's own form, its agreement with the passages
the question retrieves, the retrieval's scores, the draft's kind against the
question's), the question's own features (``signals.question_features``) and, by
default, the question's sentence embedding reduced by a PCA learned in ``fit``; the
combiner is ``gates.combiner``'s (two logistic heads and boosted trees for the expected
gain of retrieving, rank-averaged by default).

One decision costs one LLM call (the draft) and one retrieval. A decision not to
retrieve serves the draft (``GateDecision.draft_answer``) and keeps the passages it
checked as ``GateDecision.passages`` (sources a door may show); a decision to retrieve
answers over those same passages: a door never retrieves a second time.

Offline (``fit_outcomes``, ``score_records``) the draft is the recorded answer without
retrieval (``pred_no_retrieval``) and the retrieval runs over the gate's retriever: no
LLM is asked. The retriever and the question encoder are backends, passed again at
load; the gate records which kind of retriever it was fitted with and warns when it
scores through another (retrieval scores and agreement read differently).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from ..answering import ANSWER_STOP, DEFAULT_INSTRUCTION, build_prompt, clean_answer
from ..data import Hit, OutcomeRecord
from ..errors import BackendMisconfiguredError, LogprobsUnavailableError, NotFittedError
from ..models.chat import ChatModel, ChatOptions, TokenLogprob, user
from ..models.protocols import Embedder, check_vectors
from ..retrieval.base import Retriever
from ..selfknowledge import outcome_scores
from ..signals.draft import DRAFT_FEATURE_NAMES, LOGPROB_FEATURE_NAMES, explain, logprob_features, read_draft
from ..signals.draft_profile import DraftDrift, DraftProfile, DraftWatch
from ..signals.question_features import FEATURE_NAMES, question_features
from .asking import DEFAULT_DEADLINE, AsksInRounds, Round, Rounds, describe_failure
from .assessment import Assessment
from .base import Gate
from .combiner import MODELS, FeatureCombiner, Model, default_threshold, fit_feature_combiner
from .constraints import Boolean, Integer, OneOf, Real, Text
from .domain_columns import DomainColumns, record_domain
from .draft_embedding import DraftProjection
from .encoder_record import check_encoder_record, encoder_record
from .shadow_learning import LearnsFromShadows
from .stacking import TARGETS, Target

logger = logging.getLogger(__name__)

#: The combiner's columns before the embedding's components, in order (then the
#: log-probability columns, with ``logprob_features``).
COLUMNS: tuple[str, ...] = (*FEATURE_NAMES, *DRAFT_FEATURE_NAMES)
#: Alternatives per token asked for with ``logprob_features`` (OpenAI allows 20).
TOP_LOGPROBS = 5


class DraftCheckGate(LearnsFromShadows, AsksInRounds, Gate):
    """Retrieve when the LLM's own draft, checked against one cheap retrieval, looks
    likely to be improved by answering over those passages.

    Need score: with ``model="logistic"`` and ``target="gain"``, the expected gain of
    retrieving, P(correct with passages) − P(correct without) (retrieve iff > 0); with
    ``"blend"`` (default) the mean rank of the logistic and boosted scores among their
    training scores, in [0, 1], retrieving above the rank at which the training rows'
    expected gain turns positive. A decision's ``details`` hold the draft, the reasons
    a person can check (``reasons``: the agreement found, the hedge matched, a
    mismatched answer kind), each head's probability and the passages' count.

    Args:
        chat: the chat model that drafts (default: the embedded SmolLM2).
        retriever: the one retrieval the draft is checked against (e.g.
            ``BM25Retriever.from_jsonl(corpus)``); required to fit and to decide.
        embedder: the question encoder of ``embedding`` (default: the embedded MiniLM).
        k: passages retrieved (and answered over when the gate retrieves).
        embedding: feed the combiner the question's embedding, reduced by PCA.
        embedding_dims: the PCA's components.
        logprob_features: also read the draft's token log-probabilities
            (``signals.draft.LOGPROB_FEATURE_NAMES``): the backend must give them
            (``LogprobsUnavailableError`` otherwise), and the outcome records fitted on
            must hold them (``logprobs_no_retrieval``).
        model: ``"blend"``, ``"logistic"`` or ``"boosted"`` (``gates.combiner``).
        target: ``"gain"`` (two heads) or ``"helps"`` (P(retrieval helps)).
        C: the logistic heads' inverse regularisation strength.
        instruction: the draft prompt's first line (the answerer's, so the draft is the
            answer the answerer would give without passages).
        max_tokens: the draft's length cap (the answerer's 24 by default).
        retrieval_timeout: seconds a decision waits for its retrieval (``None``: no
            limit); past them it is a fallback decision. The search itself cannot be
            stopped: a hung retriever keeps its thread.
        max_workers: concurrent requests for backends without batching.
        deadline: seconds one decision (or batch) may wait on such a backend.
        fallback_retrieve: the decision taken when a question or a backend fails.
        domain_field: fit with a domain indicator: each outcome record's domain is
            ``record.extra[domain_field]`` (e.g. ``"task"``), one-hot columns
            ``domain=<name>`` and ``domain=other`` (``gates.domain_columns``).
        domain: the deployment's domain, read at decision time by a gate fitted with
            ``domain_field`` (a serving parameter: setting it keeps the fitted state);
            unset or never seen in fitting, questions read as ``other``.
        draft_embedding: also read the draft's own embedding (the question encoder's),
            reduced by a PCA learned in ``fit`` (``gates.draft_embedding``): one more
            encoder call per decision.
        draft_embedding_dims: that PCA's components.

    A fitted gate also records the profile of its training drafts and compares the
    drafts it reads with it (``draft_drift_``, ``signals.draft_profile``), warning once
    when they look unlike them.
    """

    name = "draft-check"
    answers_first = True
    retrieves_first = True
    backend_params = frozenset({"chat", "retriever", "embedder"})
    fitted_by = "fit_outcomes(records)"
    _fitted_state = (
        "_combiner",
        "_retrieve_above",
        "_fitted_retriever",
        "_domains",
        "_draft_watch",
        "_draft_projection",
    )
    _serving_params = AsksInRounds._serving_params | {"retrieval_timeout", "domain"}
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "k": Integer(1),
        "embedding": Boolean(),
        "embedding_dims": Integer(1),
        "logprob_features": Boolean(),
        "model": OneOf(*MODELS),
        "target": OneOf(*TARGETS),
        "C": Real(0, closed="neither"),
        "instruction": Text(),
        "max_tokens": Integer(1),
        "retrieval_timeout": [Real(0, closed="neither"), None],
        "domain_field": [Text(), None],
        "domain": [Text(), None],
        "draft_embedding": Boolean(),
        "draft_embedding_dims": Integer(1),
    }

    def __init__(
        self,
        chat: ChatModel | None = None,
        retriever: Retriever | None = None,
        embedder: Embedder | None = None,
        *,
        k: int = 3,
        embedding: bool = True,
        embedding_dims: int = 32,
        logprob_features: bool = False,
        model: Model = "blend",
        target: Target = "gain",
        C: float = 0.05,
        instruction: str = DEFAULT_INSTRUCTION,
        max_tokens: int = 24,
        retrieval_timeout: float | None = 30.0,
        max_workers: int = 1,
        deadline: float | None = DEFAULT_DEADLINE,
        fallback_retrieve: bool = True,
        domain_field: str | None = None,
        domain: str | None = None,
        draft_embedding: bool = False,
        draft_embedding_dims: int = 16,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self._keep_asking(chat, max_workers, deadline)
        self.retriever = retriever
        self.embedder = embedder
        self.k = k
        self.embedding = embedding
        self.embedding_dims = embedding_dims
        self.logprob_features = logprob_features
        self.model = model
        self.target = target
        self.C = C
        self.instruction = instruction
        self.max_tokens = max_tokens
        self.retrieval_timeout = retrieval_timeout
        self.domain_field = domain_field
        self.domain = domain
        self.draft_embedding = draft_embedding
        self.draft_embedding_dims = draft_embedding_dims
        self._default_encoder: Embedder | None = None
        self._combiner: FeatureCombiner | None = None
        self._retrieve_above: float | None = None
        self._fitted_retriever: str | None = None
        self._warned_of_retriever = False
        self._domains: DomainColumns | None = None
        self._warned_of_domain = False
        self._draft_watch: DraftWatch | None = None
        self._draft_projection: DraftProjection | None = None

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if params.get("domain") is not None and params.get("domain_field") is None:
            raise ValueError("domain= is read by a gate fitted with a domain indicator; give domain_field= too")

    # ------------------------------------------------------------------ state
    @property
    def is_fitted(self) -> bool:
        return self._combiner is not None

    @property
    def combiner_(self) -> FeatureCombiner:
        """The fitted combiner."""
        if self._combiner is None:
            raise NotFittedError(f"{type(self).__name__} is not fitted: {self.fit_hint()}")
        return self._combiner

    @property
    def columns(self) -> tuple[str, ...]:
        """The combiner's feature columns, in order (before the embedding's components)."""
        return (*COLUMNS, *LOGPROB_FEATURE_NAMES) if self.logprob_features else COLUMNS

    @property
    def domains_(self) -> tuple[str, ...] | None:
        """The domains the gate was fitted on (``None``: fitted without ``domain_field``)."""
        return None if self._domains is None else self._domains.known

    @property
    def draft_drift_(self) -> DraftDrift | None:
        """The drafts read since the gate was fitted or loaded against its training
        drafts (``signals.draft_profile``); ``None`` before any draft was read, or for
        a gate saved without a profile of its training drafts (``profile_drafts``)."""
        return None if self._draft_watch is None else self._draft_watch.comparison()

    def _default_threshold(self) -> float:
        return self._fitted_value(self._retrieve_above)

    def _encoder(self) -> Embedder:
        if self.embedder is not None:
            return self.embedder
        return self._built_once("_default_encoder", _default_embedder)

    def _search(self, questions: list[str]) -> list[tuple[Hit, ...]]:
        """The ``k`` best passages of each question from the gate's retriever."""
        if self.retriever is None:
            raise BackendMisconfiguredError(
                f"{self.name}: no retriever; pass retriever= (e.g. BM25Retriever.from_jsonl(corpus)), "
                "or --corpus on the command line"
            )
        kind = retriever_kind(self.retriever)
        if self._fitted_retriever not in (None, kind) and not self._warned_of_retriever:
            self._warned_of_retriever = True  # once per gate, not on every decision
            logger.warning(
                "%s was fitted with a %s and now checks drafts through a %s: its retrieval features may read "
                "differently; fit it with this retriever for figures that hold",
                self.name,
                self._fitted_retriever,
                kind,
            )
        found = self.retriever.search_batch(questions, self.k)
        if len(found) != len(questions):
            raise ValueError(f"the retriever returned {len(found)} result lists for {len(questions)} questions")
        return [tuple(hits) for hits in found]

    def _search_within(self, questions: list[str]) -> list[tuple[Hit, ...]]:
        """``_search``, given up on (``TimeoutError``) after ``retrieval_timeout`` seconds."""
        if self.retrieval_timeout is None:
            return self._search(questions)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draft-check-retrieval")
        try:
            return pool.submit(self._search, questions).result(timeout=self.retrieval_timeout)
        except TimeoutError:  # concurrent.futures' own, since Python 3.11
            raise TimeoutError(f"no passages within {self.retrieval_timeout:g} s") from None
        finally:
            pool.shutdown(wait=False)

    def _inputs(
        self,
        questions: list[str],
        drafts: Sequence[str],
        found: Sequence[tuple[Hit, ...]],
        tokens: Sequence[Sequence[TokenLogprob]] | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None, list[Any]]:
        """The combiner's feature rows, the questions' embeddings (if used) and each
        draft's reading; ``tokens``: each draft's log-probabilities, read with
        ``logprob_features``."""
        readings = [
            read_draft(q, d, [h.as_passage() for h in hits], [h.score for h in hits])
            for q, d, hits in zip(questions, drafts, found)
        ]
        draft_rows = np.array([r.values() for r in readings], dtype=np.float64).reshape(len(questions), -1)
        blocks = [question_features(questions), draft_rows]
        if self.logprob_features:
            assert tokens is not None  # the callers read them first
            blocks.append(logprob_features(tokens))
        features = np.hstack(blocks)
        embeddings = None
        if self.embedding:
            encoder = self._encoder()
            embeddings = check_vectors(encoder.embed(questions), len(questions), encoder.model_id)
        return features, embeddings, readings

    # ------------------------------------------------------------------ fitting
    def _fit_outcomes(self, records: list[OutcomeRecord], metric: str) -> None:
        """Fit the combiner on outcome records: each record's recorded answer without
        retrieval is its draft, checked against the gate's retriever."""
        if len(records) < 10:
            raise ValueError(f"{self.name}: {len(records)} outcome records are too few to fit a combiner")
        questions = [r.question for r in records]
        drafts = [r.pred_no_retrieval for r in records]
        tokens = self._recorded_tokens(records)
        found = self._search(questions)
        features, embeddings, readings = self._inputs(questions, drafts, found, tokens)
        names = list(self.columns)
        projection = None
        if self.draft_embedding:
            vectors = self._embed_drafts(drafts)
            projection = DraftProjection.fit(vectors, self.draft_embedding_dims)
            features = np.hstack([features, projection.columns(vectors)])
            names += projection.names
        domains = None
        if self.domain_field is not None:
            values = [record_domain(r, self.domain_field) for r in records]
            domains = DomainColumns.fitted(values)
            if not domains.known:
                raise ValueError(f"{self.name}: no outcome record has the domain field {self.domain_field!r}")
            features = np.hstack([features, domains.rows(values)])
            names += domains.names
        a, b = outcome_scores(records, metric)
        combiner = fit_feature_combiner(
            features,
            names,
            a,
            b,
            embeddings=embeddings,
            embedding_dims=self.embedding_dims,
            target=self.target,
            model=self.model,
            C=self.C,
        )
        self._combiner = combiner
        self._retrieve_above = default_threshold(combiner, features, embeddings, float(np.mean(b > a)))
        self._keep_fit_rows(features, embeddings, records, metric)  # to learn from served decisions (gates.shadow)
        assert self.retriever is not None  # _search refuses a gate without one
        self._fitted_retriever = retriever_kind(self.retriever)
        self._domains = domains
        self._draft_projection = projection
        self._draft_watch = DraftWatch(DraftProfile.of(readings), self.name)
        logger.info("%s fitted on %d records (model %s, target %s)", self.name, len(records), self.model, self.target)

    def score_records(self, records: Sequence[OutcomeRecord]) -> np.ndarray:
        """Need scores of outcome records with their recorded answer without retrieval
        as the draft, asking no LLM (one retrieval each)."""
        self._check_fitted()
        questions = [r.question for r in records]
        if not questions:
            return np.zeros(0, dtype=np.float64)
        drafts = [r.pred_no_retrieval for r in records]
        tokens = self._recorded_tokens(records)
        features, embeddings, readings = self._inputs(questions, drafts, self._search(questions), tokens)
        features = self._with_draft_embedding(features, drafts)
        if self.domain_field is not None:
            features = self._with_domains(
                features, [record_domain(r, self.domain_field) or self.domain for r in records]
            )
        if self._draft_watch is not None:
            self._draft_watch.observe(readings)
        return self.combiner_.score(features, embeddings)

    def profile_drafts(self, records: Sequence[OutcomeRecord]) -> Self:
        """Take the drafts of ``records`` (their answers without retrieval, checked
        against the gate's retriever) as the training drafts the gate's drafts are
        compared with (``draft_drift_``): for a gate saved before gates recorded that
        profile, given the records it was fitted on. Its decisions do not change."""
        self._check_fitted()
        questions = [r.question for r in records]
        if not questions:
            raise ValueError(f"{self.name}: no outcome records to profile")
        found = self._search(questions)
        readings = [
            read_draft(q, r.pred_no_retrieval, [h.as_passage() for h in hits], [h.score for h in hits])
            for q, r, hits in zip(questions, records, found)
        ]
        self._draft_watch = DraftWatch(DraftProfile.of(readings), self.name)
        return self

    def _embed_drafts(self, drafts: Sequence[str]) -> np.ndarray:
        """The encoder's vector of each draft."""
        encoder = self._encoder()
        return check_vectors(encoder.embed(list(drafts)), len(drafts), encoder.model_id)

    def _with_draft_embedding(self, features: np.ndarray, drafts: Sequence[str]) -> np.ndarray:
        """``features`` with the columns of the drafts' projected embeddings (with
        ``draft_embedding``; else as they are)."""
        if self._draft_projection is None:
            return features
        return np.hstack([features, self._draft_projection.columns(self._embed_drafts(drafts))])

    def _with_domains(self, features: np.ndarray, values: Sequence[str | None]) -> np.ndarray:
        """``features`` with the domain columns of ``values`` (one per row); a domain
        the gate was not fitted on reads as ``other``, logged once."""
        domains = self._domains
        assert domains is not None  # fitted with domain_field: loaded or fitted with its domains
        unknown = [v for v in values if domains.reads(v) != v]
        if unknown and not self._warned_of_domain:
            self._warned_of_domain = True  # once per gate, not on every decision
            what = "no domain (set domain=)" if unknown[0] is None else f"domain {unknown[0]!r}"
            logger.warning(
                "%s was fitted with the domains %s; questions of %s read as 'other'",
                self.name,
                ", ".join(domains.known) or "(none)",
                what,
            )
        return np.hstack([features, domains.rows(values)])

    def _recorded_tokens(self, records: Sequence[OutcomeRecord]) -> list[tuple[TokenLogprob, ...]] | None:
        """Each record's recorded draft log-probabilities, with ``logprob_features``
        (``ValueError`` naming a record without them), else ``None``."""
        if not self.logprob_features:
            return None
        missing = next((r.id for r in records if r.logprobs_no_retrieval is None), None)
        if missing is not None:
            raise ValueError(
                f"{self.name}: record {missing!r} has no 'logprobs_no_retrieval'; with logprob_features the gate "
                "reads the recorded log-probabilities of the answer without retrieval"
            )
        return [r.logprobs_no_retrieval or () for r in records]

    # ------------------------------------------------------------------ scoring
    def prompt(self, question: str) -> str:
        """The draft prompt: the answerer's, without passages."""
        return build_prompt(question, None, self.instruction)

    def _rounds(self, questions: list[str]) -> Rounds:
        options = ChatOptions(max_tokens=self.max_tokens, temperature=0.0, stop=list(ANSWER_STOP))
        if self.logprob_features:
            options["top_logprobs"] = TOP_LOGPROBS
        replies = yield Round([user(self.prompt(q)) for q in questions], "answer", options)
        if self.logprob_features and any(not isinstance(r, Exception) and r.tokens is None for r in replies):
            raise LogprobsUnavailableError(
                f"{self.name}: chat model {self.chat_model.model_id!r} returned no token log-probabilities, which "
                "this gate was fitted to read (logprob_features=True); use a backend that gives them"
            )
        tokens = [() if isinstance(r, Exception) else (r.tokens or ()) for r in replies]
        drafts = [None if isinstance(r, Exception) else clean_answer(r.text) for r in replies]
        fallbacks = [describe_failure(r) if isinstance(r, Exception) else None for r in replies]
        calls: list[float | None] = [1.0] * len(questions)  # one draft each, failed or not
        try:
            found = self._search_within(questions)
        except BackendMisconfiguredError:
            raise
        except Exception as exc:  # a failing retriever costs these decisions, not the chain
            logger.warning("%s: the retrieval failed: %s", self.name, exc)
            reason = f"retriever error: {type(exc).__name__}: {exc}"
            return Assessment(
                np.full(len(questions), math.nan),
                [{"draft": d} if d is not None else {} for d in drafts],
                drafts=drafts,
                fallbacks=[f or reason for f in fallbacks],
                llm_calls=calls,
            )
        features, embeddings, readings = self._inputs(questions, [d or "" for d in drafts], found, tokens)
        features = self._with_draft_embedding(features, [d or "" for d in drafts])
        if self.domain_field is not None:
            features = self._with_domains(features, [self.domain] * len(questions))
        if self._draft_watch is not None:  # every draft read counts in the comparison with training
            self._draft_watch.observe(r for d, r in zip(drafts, readings) if d is not None)
        combiner = self.combiner_
        scores = combiner.score(features, embeddings)
        heads = combiner.head_probabilities(features, embeddings)
        details: list[dict[str, Any]] = []
        for i, (draft, reading) in enumerate(zip(drafts, readings)):
            if draft is None:
                scores[i] = math.nan  # no draft was read: the fallback decides
                details.append({})
                continue
            details.append(
                {
                    "draft": draft,
                    "reasons": explain(reading),
                    "passages": reading.n_passages,
                    **{f"p_{head}": float(p[i]) for head, p in heads.items()},
                }
            )
            if self._domains is not None:
                details[-1]["domain"] = self._domains.reads(self.domain)
        return Assessment(scores, details, drafts=drafts, fallbacks=fallbacks, llm_calls=calls, passages=list(found))

    # ------------------------------------------------------------------ persistence
    def _save_state(self, directory: Path) -> dict[str, Any]:
        combiner = self.combiner_
        state: dict[str, Any] = {
            "combiner": combiner.write_files(directory),
            "retrieve_above": self._retrieve_above,
            "retriever": self._fitted_retriever,
        }
        if combiner.projection is not None:
            state["encoder"] = encoder_record(self._encoder(), len(combiner.projection.mean))
        if self._draft_projection is not None:
            state["draft_projection"] = self._draft_projection.write(directory)
            state.setdefault("encoder", encoder_record(self._encoder(), self._draft_projection.width))
        if self._domains is not None:
            state["domains"] = self._domains.to_state()
        if self._draft_watch is not None:
            state["draft_profile"] = self._draft_watch.training.to_dict()
        return {**state, **self._save_learning(directory)}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        from ..errors import GateLoadError

        domains = DomainColumns.from_state(directory, state.get("domains"), self.domain_field)
        projection = self._load_draft_projection(directory, state)
        names = (
            *self.columns,
            *(projection.names if projection is not None else ()),
            *(domains.names if domains is not None else ()),
        )
        combiner = FeatureCombiner.from_files(directory, state.get("combiner"), names)
        if (combiner.projection is not None) != self.embedding:
            raise GateLoadError(f"{directory}: field 'params.embedding' does not match the saved combiner")
        if combiner.projection is not None:
            width = check_encoder_record(directory, state.get("encoder"), self.embedder)
            if width != len(combiner.projection.mean):
                raise GateLoadError(f"{directory}: field 'state.encoder.dimension' is not the projection's width")
        above, retriever = state.get("retrieve_above"), state.get("retriever")
        if isinstance(above, bool) or not isinstance(above, (int, float)) or not math.isfinite(above):
            raise GateLoadError(f"{directory}: field 'state.retrieve_above' must be a finite number")
        if not isinstance(retriever, str):
            raise GateLoadError(f"{directory}: field 'state.retriever' must name the retriever fitted with")
        self._combiner, self._retrieve_above, self._fitted_retriever = combiner, float(above), retriever
        self._domains, self._draft_projection = domains, projection
        profile = state.get("draft_profile")  # absent from gates saved before it was recorded
        if profile is not None:
            try:
                self._draft_watch = DraftWatch(DraftProfile.from_dict(profile, "state.draft_profile"), self.name)
            except ValueError as exc:
                raise GateLoadError(f"{directory}: {exc}") from None
        self._load_learning(directory, state)

    def _load_draft_projection(self, directory: Path, state: dict[str, Any]) -> DraftProjection | None:
        """The saved projection of the drafts' embeddings, as ``draft_embedding`` says
        there is one, its width the saved encoder's."""
        from ..errors import GateLoadError

        if not self.draft_embedding:
            if state.get("draft_projection") is not None:
                raise GateLoadError(
                    f"{directory}: field 'state.draft_projection' is set, but 'params.draft_embedding' is false"
                )
            return None
        projection = DraftProjection.read(directory, state.get("draft_projection"))
        if check_encoder_record(directory, state.get("encoder"), self.embedder) != projection.width:
            raise GateLoadError(f"{directory}: field 'state.encoder.dimension' is not the draft projection's width")
        return projection


def retriever_kind(retriever: Retriever) -> str:
    """The class of the retriever searched, through memos that wrap one (``wrapped``)."""
    while hasattr(retriever, "wrapped"):
        retriever = retriever.wrapped
    return type(retriever).__name__


def _default_embedder() -> Embedder:
    from ..models.defaults import default_embedder

    return default_embedder()
