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

With ``self_report`` the draft is asked with the self-report instruction
(``answering.self_report``): the answer or "unknown", then the model's certainty; the
draft served is the answer without its marker, and the certainty is two more columns.
With ``cold_start`` an unfitted gate decides from that self-report alone
(``gates.draft_check.cold_start``: an abstention or stated doubt retrieves), so it is ready without
any outcome of the model at hand; ``fit_outcomes`` then hands over to the combiner.
Whether the combiner reads the draft's agreement with the passages is the
``agreement`` parameter's, by default decided on the records fitted on
(``gates.draft_check.agreement_check``).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from ...answering.answerer import ANSWER_STOP, DEFAULT_INSTRUCTION, build_prompt, clean_answer
from ...answering.self_report import (
    SELF_REPORT_FEATURE_NAMES,
    read_self_report,
    recorded_certainty,
    self_report_features,
    self_report_instruction,
)
from ...errors import BackendMisconfiguredError, LogprobsUnavailableError
from ...models.chat.base import ChatModel, ChatOptions, TokenLogprob, user
from ...models.protocols import Embedder, check_vectors
from ...records.data import Hit, OutcomeRecord
from ...records.decision import GateDecision
from ...records.selfknowledge import outcome_scores
from ...records.validation import MAX_EMBEDDING_DIMS, MAX_NEW_TOKENS, MAX_SECONDS
from ...retrieval.base import Retriever
from ...signals.draft import DRAFT_FEATURE_NAMES, LOGPROB_FEATURE_NAMES, explain, logprob_features, read_draft
from ...signals.draft_profile import DraftDrift, DraftProfile, DraftWatch
from ...signals.question_features import FEATURE_NAMES, question_features
from ..base.asking import DEFAULT_DEADLINE, AsksInRounds, Round, Rounds, describe_failure
from ..base.assessment import Assessment
from ..base.constraints import Boolean, Integer, OneOf, Real, Text
from ..base.encoder_record import check_encoder_record, encoder_record
from ..base.feedback import FeedbackNotSupportedError
from ..base.gate import Gate
from ..combiner.features import MODELS, FeatureCombiner, Model, default_threshold, fit_feature_combiner
from ..combiner.held import HoldsCombiner
from ..combiner.logistic import TARGETS, Target
from ..shadow.learning import LearnsFromShadows
from .agreement_check import AgreementCheck, check_agreement, without_agreement
from .cold_start import COLD_START_THRESHOLD, cold_start_reading
from .domain_columns import DomainColumns, record_domain
from .draft_embedding import DraftProjection

logger = logging.getLogger(__name__)

#: The combiner's columns before the embedding's components, in order (then the
#: log-probability columns, with ``logprob_features``).
COLUMNS: tuple[str, ...] = (*FEATURE_NAMES, *DRAFT_FEATURE_NAMES)
#: Alternatives per token asked for with ``logprob_features`` (OpenAI allows 20).
TOP_LOGPROBS = 5
#: Whether the combiner reads the draft's agreement with the passages: decided on the
#: records fitted on (``"auto"``), or always, or never.
AGREEMENT = ("auto", "always", "never")
#: Parameters added since draft-check gates were first saved, with the value a gate
#: saved without them was fitted and decides with: such a gate loads as it was.
_BEFORE_ADDED = {"self_report": False, "agreement": "always", "cold_start": False}


class DraftCheckGate(HoldsCombiner, LearnsFromShadows, AsksInRounds, Gate):
    """Retrieve when the LLM's own draft, checked against one cheap retrieval, looks
    likely to be improved by answering over those passages.

    Need score: with ``model="logistic"`` and ``target="gain"``, the expected gain of
    retrieving, P(correct with passages) − P(correct without) (retrieve iff > 0); with
    ``"blend"`` (default) the mean rank of the logistic and boosted scores among their
    training scores, in [0, 1], retrieving above the rank at which the training rows'
    expected gain turns positive. A decision's ``details`` hold the draft, the reasons
    a person can check (``reasons``: the agreement found, the hedge matched, a
    mismatched answer kind), each head's probability and the passages' count. In the
    cold start (``cold_start``, before any fit) the need score is the fixed one of
    ``gates.draft_check.cold_start`` (1.0 for an abstention, 0.75 for stated doubt, 0.5 for no
    certainty stated, 0.0 for stated certainty), retrieving above 0.6, with its reason.

    Args:
        chat: the chat model that drafts (default: the embedded SmolLM2).
        retriever: the one retrieval the draft is checked against (e.g.
            ``BM25Retriever.from_jsonl(corpus)``); required to fit and to decide.
        embedder: the question encoder of ``embedding`` (default: the embedded MiniLM).
        k: passages retrieved (and answered over when the gate retrieves).
        embedding: feed the combiner the question's embedding, reduced by PCA.
        embedding_dims: the PCA's components (at most 65536).
        logprob_features: also read the draft's token log-probabilities
            (``signals.draft.LOGPROB_FEATURE_NAMES``): the backend must give them
            (``LogprobsUnavailableError`` otherwise), and the outcome records fitted on
            must hold them (``logprobs_no_retrieval``).
        self_report: ask the draft with the self-report instruction (``instruction``,
            then an invitation to say "unknown" and to say "certain" or "uncertain"),
            serve the answer without its marker, and read the certainty stated
            (``self_uncertain``, ``self_certain``; records fitted on hold it as
            ``certainty_no_retrieval``, as ``adaptive-gates collect`` writes it). On by
            default: it is what the cold start reads and what ``collect`` records; a
            gate saved before it existed loads with it off, as it was fitted.
        cold_start: until ``fit_outcomes`` runs, decide from what the model says about
            itself (``gates.draft_check.cold_start``): retrieve on an empty or hedged draft or
            stated uncertainty, with no fitted weights. Off by default: an unfitted gate
            then refuses to decide.
        agreement: whether the combiner reads the draft's agreement with the passages
            (``agree_any``, ``agree_top``, ``agree_share``, ``overlap_best``):
            ``"auto"`` cross-fits with and without them on the records fitted on and
            keeps them only if they raise the out-of-fold gap capture; ``"always"`` or
            ``"never"``. The choice is ``agreement_check_`` and is saved.
        model: ``"blend"``, ``"logistic"`` or ``"boosted"`` (``gates.combiner``).
        target: ``"gain"`` (two heads) or ``"helps"`` (P(retrieval helps)).
        C: the logistic heads' inverse regularisation strength.
        instruction: the draft prompt's first line (the answerer's, so the draft is the
            answer the answerer would give without passages).
        max_tokens: the draft's length cap (the answerer's 24 by default).
        retrieval_timeout: seconds a decision waits for its retrieval, at most a day
            (86400; ``None``: no limit); past them it is a fallback decision. The search itself cannot be
            stopped: a hung retriever keeps its thread.
        max_workers: concurrent requests for backends without batching.
        deadline: seconds one decision (or batch) may wait on such a backend.
        fallback_retrieve: the decision taken when a question or a backend fails.
        domain_field: fit with a domain indicator: each outcome record's domain is
            ``record.extra[domain_field]`` (e.g. ``"task"``), one-hot columns
            ``domain=<name>`` and ``domain=other`` (``gates.draft_check.domain_columns``).
        domain: the deployment's domain, read at decision time by a gate fitted with
            ``domain_field`` (a serving parameter: setting it keeps the fitted state);
            unset or never seen in fitting, questions read as ``other``.
        draft_embedding: also read the draft's own embedding (the question encoder's),
            reduced by a PCA learned in ``fit`` (``gates.draft_check.draft_embedding``): one more
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
        "_agreement_check",
        "_domains",
        "_draft_watch",
        "_draft_projection",
    )
    _serving_params = AsksInRounds._serving_params | {"retrieval_timeout", "cold_start", "domain"}
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "k": Integer(1),
        "embedding": Boolean(),
        "embedding_dims": Integer(1, MAX_EMBEDDING_DIMS),
        "logprob_features": Boolean(),
        "self_report": Boolean(),
        "cold_start": Boolean(),
        "agreement": OneOf(*AGREEMENT),
        "model": OneOf(*MODELS),
        "target": OneOf(*TARGETS),
        "C": Real(0, closed="neither"),
        "instruction": Text(),
        "max_tokens": Integer(1, MAX_NEW_TOKENS),
        "retrieval_timeout": [Real(0, MAX_SECONDS, closed="right"), None],
        "domain_field": [Text(), None],
        "domain": [Text(), None],
        "draft_embedding": Boolean(),
        "draft_embedding_dims": Integer(1, MAX_EMBEDDING_DIMS),
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
        self_report: bool = True,
        cold_start: bool = False,
        agreement: str = "auto",
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
        self.self_report = self_report
        self.cold_start = cold_start
        self.agreement = agreement
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
        self._agreement_check: AgreementCheck | None = None
        self._warned_of_retriever = False
        self._retriever_notes_logged: set[str] = set()
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
        """Fitted, or ready as built by its cold start."""
        return self._combiner is not None or self.cold_start

    @property
    def in_cold_start(self) -> bool:
        """Whether decisions come from the cold start (no combiner fitted yet)."""
        return self._combiner is None and self.cold_start

    @property
    def agreement_check_(self) -> AgreementCheck | None:
        """Whether the fitted combiner reads the draft's agreement, and why (``None``
        before a fit)."""
        return self._agreement_check

    @property
    def columns(self) -> tuple[str, ...]:
        """The combiner's feature columns, in order (before the embedding's components):
        those the parameters ask for, without the agreement columns where the fit left
        them out (``agreement_check_``) or ``agreement="never"``."""
        check = self._agreement_check
        used = check.used if check is not None else self.agreement != "never"
        return self._all_columns() if used else without_agreement(self._all_columns())

    def _all_columns(self) -> tuple[str, ...]:
        """Every column the parameters ask for, agreement included: what ``_inputs`` builds."""
        logprob = LOGPROB_FEATURE_NAMES if self.logprob_features else ()
        self_report = SELF_REPORT_FEATURE_NAMES if self.self_report else ()
        return (*COLUMNS, *logprob, *self_report)

    def _used(self, features: np.ndarray) -> np.ndarray:
        """``features`` (every column of ``_all_columns``) cut to ``columns``."""
        every, used = self._all_columns(), self.columns
        return features if used == every else features[:, [every.index(c) for c in used]]

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
        if self.in_cold_start:
            return COLD_START_THRESHOLD
        return self._fitted_value(self._retrieve_above)

    @classmethod
    def _current_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Saved parameters, with those added since the gate was saved set to what the
        gate was fitted with (plain drafts, agreement read, no cold start), never to
        today's defaults: a gate saved before them loads and decides as it did."""
        current = super()._current_params(params)
        added = {name: value for name, value in _BEFORE_ADDED.items() if name not in current}
        if added:
            logger.debug("%s saved before %s: loading it as fitted (%s)", cls.name, ", ".join(added), added)
        return {**added, **current}

    def _encoder(self) -> Embedder:
        return self._given_or_default_encoder(self.embedder)

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
            logger.warning(  # the fitted kind comes from the saved file: quoted, never written as it is
                "%s was fitted with a %r and now checks drafts through a %r: its retrieval features may read "
                "differently; fit it with this retriever for figures that hold",
                self.name,
                self._fitted_retriever,
                kind,
            )
        found = self.retriever.search_batch(questions, self.k)
        if len(found) != len(questions):
            raise ValueError(f"the retriever returned {len(found)} result lists for {len(questions)} questions")
        checked = [checked_hits(hits, self.k) for hits in found]
        for notes in dict.fromkeys(note for hits in checked for note in hits.notes):
            if notes not in self._retriever_notes_logged:  # once per gate and kind of trouble
                self._retriever_notes_logged.add(notes)
                logger.warning("%s: the retriever %s", self.name, notes)
        return list(checked)

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
        certainties: Sequence[str | None] | None = None,
        *,
        every_column: bool = False,
    ) -> tuple[np.ndarray, np.ndarray | None, list[Any]]:
        """The feature rows of ``columns`` (of every column, ``_all_columns``, with
        ``every_column``: what a fit chooses among), the questions' embeddings (if used)
        and each draft's reading; ``tokens``: each draft's log-probabilities, read with
        ``logprob_features``; ``certainties``: the certainty stated with each draft, read
        with ``self_report`` (none given: none stated)."""
        readings = [
            read_draft(q, d, [h.as_passage() for h in hits], [h.score for h in hits])
            for q, d, hits in zip(questions, drafts, found)
        ]
        draft_rows = np.array([r.values() for r in readings], dtype=np.float64).reshape(len(questions), -1)
        blocks = [question_features(questions), draft_rows]
        if self.logprob_features:
            assert tokens is not None  # the callers read them first
            blocks.append(logprob_features(tokens))
        if self.self_report:
            blocks.append(self_report_features(certainties or [None] * len(questions)))
        features = np.hstack(blocks)
        if not every_column:
            features = self._used(features)
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
        ungraded = next((r.id for r in records if not r.answers), None)
        if ungraded is not None:
            raise ValueError(
                f"{self.name}: record {ungraded!r} has no gold answers to grade against; fit with "
                "labels='agreement' (the answer over the passages as the reference)"
            )
        questions = [r.question for r in records]
        drafts = [r.pred_no_retrieval for r in records]
        tokens = self._recorded_tokens(records)
        certainties = self._recorded_certainties(records)
        found = self._search(questions)
        features, embeddings, readings = self._inputs(questions, drafts, found, tokens, certainties, every_column=True)
        a, b = outcome_scores(records, metric)
        if self.target == "gain" and np.all(b == b[0]):
            raise ValueError(
                f"{self.name}: the answer with retrieval is graded {b[0]:g} on every record (as with "
                "labels='agreement', where it is the reference), so P(correct with passages) cannot be learnt; "
                "fit with target='helps'"
            )
        check = self._check_agreement(features, a, b, embeddings)
        every = self._all_columns()
        names = list(every if check.used else without_agreement(every))
        features = features[:, [every.index(c) for c in names]]
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
        combiner = self._fit_combiner(features, names, a, b, embeddings)
        self._combiner, self._agreement_check = combiner, check
        self._retrieve_above = default_threshold(combiner, features, embeddings, float(np.mean(b > a)))
        self._keep_fit_rows(features, embeddings, records, metric)  # to learn from served decisions (gates.shadow)
        assert self.retriever is not None  # _search refuses a gate without one
        self._fitted_retriever = retriever_kind(self.retriever)
        self._domains = domains
        self._draft_projection = projection
        self._draft_watch = DraftWatch(DraftProfile.of(readings), self.name)
        logger.info("%s fitted on %d records (model %s, target %s)", self.name, len(records), self.model, self.target)

    def _fit_combiner(
        self, features: np.ndarray, columns: Sequence[str], a: np.ndarray, b: np.ndarray, embeddings: np.ndarray | None
    ) -> FeatureCombiner:
        """A combiner fitted with the gate's settings on these rows and columns."""
        return fit_feature_combiner(
            features,
            columns,
            a,
            b,
            embeddings=embeddings,
            embedding_dims=self.embedding_dims,
            target=self.target,
            model=self.model,
            C=self.C,
        )

    def _check_agreement(
        self, features: np.ndarray, a: np.ndarray, b: np.ndarray, embeddings: np.ndarray | None
    ) -> AgreementCheck:
        """Whether the combiner reads the agreement columns (``agreement``); with
        ``"auto"``, as cross-fitting on these rows shows (``gates.draft_check.agreement_check``)."""
        if self.agreement != "auto":
            return AgreementCheck(self.agreement == "always", f"agreement={self.agreement!r}")
        return check_agreement(self._fit_combiner, features, self._all_columns(), a, b, embeddings)

    def _recorded_certainties(self, records: Sequence[OutcomeRecord]) -> list[str | None] | None:
        """Each record's stated certainty, with ``self_report`` (else ``None``), warning
        when the records' drafts and the gate's do not look asked alike."""
        stated = [recorded_certainty(r) for r in records]
        any_stated = any(c is not None for c in stated)
        if self.self_report and not any_stated and len(records) >= 10:
            logger.warning(
                "%s: none of %d records holds a stated certainty ('certainty_no_retrieval'), yet the gate asks "
                "for one (self_report=True); were their drafts asked with the self-report instruction "
                "(adaptive-gates collect --draft self-report)?",
                self.name,
                len(records),
            )
        elif not self.self_report and any_stated:
            logger.warning(
                "%s: the records hold stated certainties (self-report drafts), but this gate drafts plainly "
                "(self_report=False): its drafts will not read as the records' did",
                self.name,
            )
        return stated if self.self_report else None

    def score_records(self, records: Sequence[OutcomeRecord]) -> np.ndarray:
        """Need scores of outcome records with their recorded answer without retrieval
        as the draft (and, with ``self_report``, the certainty recorded with it), asking
        no LLM (one retrieval each; none in the cold start)."""
        self._check_fitted()
        questions = [r.question for r in records]
        if not questions:
            return np.zeros(0, dtype=np.float64)
        drafts = [r.pred_no_retrieval for r in records]
        certainties = [recorded_certainty(r) for r in records] if self.self_report else [None] * len(records)
        if self.in_cold_start:  # the self-report alone: no retrieval, no LLM
            return np.array([cold_start_reading(d, c).score for d, c in zip(drafts, certainties)], dtype=np.float64)
        tokens = self._recorded_tokens(records)
        features, embeddings, readings = self._inputs(questions, drafts, self._search(questions), tokens, certainties)
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
        """The draft prompt: the answerer's, without passages (with ``self_report``,
        its instruction followed by the self-report request)."""
        instruction = self_report_instruction(self.instruction) if self.self_report else self.instruction
        return build_prompt(question, None, instruction)

    def _read_reply(self, text: str) -> tuple[str, str | None]:
        """A draft reply read: the draft served and the certainty stated (``None``
        for a plain draft). A self-report reply may state its certainty on the line
        after the answer, so the whole reply is read."""
        if not self.self_report:
            return clean_answer(text), None
        report = read_self_report(text)
        return report.answer, report.certainty

    def _rounds(self, questions: list[str]) -> Rounds:
        # a self-report may put its certainty on the next line: no stop at a line's end
        options = ChatOptions(max_tokens=self.max_tokens, temperature=0.0)
        if not self.self_report:
            options["stop"] = list(ANSWER_STOP)
        if self.logprob_features:
            options["top_logprobs"] = TOP_LOGPROBS
        replies = yield Round([user(self.prompt(q)) for q in questions], "answer", options)
        if self.logprob_features and any(not isinstance(r, Exception) and r.tokens is None for r in replies):
            raise LogprobsUnavailableError(
                f"{self.name}: chat model {self.chat_model.model_id!r} returned no token log-probabilities, which "
                "this gate was fitted to read (logprob_features=True); use a backend that gives them"
            )
        tokens = [() if isinstance(r, Exception) else (r.tokens or ()) for r in replies]
        read = [None if isinstance(r, Exception) else self._read_reply(r.text) for r in replies]
        drafts = [None if r is None else r[0] for r in read]
        certainties = [None if r is None else r[1] for r in read]
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
        if self.in_cold_start:
            return self._cold_start_assessment(drafts, certainties, found, fallbacks, calls)
        features, embeddings, readings = self._inputs(questions, [d or "" for d in drafts], found, tokens, certainties)
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
                    **({"certainty": certainties[i]} if self.self_report else {}),
                    **{f"p_{head}": float(p[i]) for head, p in heads.items()},
                }
            )
            if self._domains is not None:
                details[-1]["domain"] = self._domains.reads(self.domain)
        _note_retriever_troubles(details, found)
        return Assessment(scores, details, drafts=drafts, fallbacks=fallbacks, llm_calls=calls, passages=list(found))

    def _served(self, decision: GateDecision) -> tuple[str, str, tuple[Hit, ...]]:
        """As ``LearnsFromShadows._served``; a gate in its cold start has no combiner to
        refit, so it learns nothing from served decisions until it is fitted."""
        if self.in_cold_start:
            raise FeedbackNotSupportedError(
                f"{self.name}: in its cold start the gate has no fitted combiner to learn into; "
                "fit it on outcome records first (fit_outcomes)"
            )
        return super()._served(decision)

    def _cold_start_assessment(
        self,
        drafts: list[str | None],
        certainties: list[str | None],
        found: list[tuple[Hit, ...]],
        fallbacks: list[str | None],
        calls: list[float | None],
    ) -> Assessment:
        """The cold start's assessment: each draft's score and reason from what the model
        said about itself; the passages checked stay on the decision, to answer over."""
        scores = np.full(len(drafts), math.nan)
        details: list[dict[str, Any]] = []
        for i, (draft, certainty, hits) in enumerate(zip(drafts, certainties, found)):
            if draft is None:
                details.append({})  # no draft was read: the fallback decides
                continue
            reading = cold_start_reading(draft, certainty)
            scores[i] = reading.score
            details.append(
                {
                    "draft": draft,
                    "certainty": certainty,
                    "reasons": [reading.reason],
                    "passages": len(hits),
                    "cold_start": True,
                }
            )
        _note_retriever_troubles(details, found)
        return Assessment(scores, details, drafts=drafts, fallbacks=fallbacks, llm_calls=calls, passages=list(found))

    # ------------------------------------------------------------------ persistence
    def _save_state(self, directory: Path) -> dict[str, Any]:
        if self.in_cold_start:
            return {"combiner": None}  # nothing fitted: the cold start's rule is fixed
        combiner = self.combiner_
        state: dict[str, Any] = {
            "combiner": combiner.write_files(directory),
            "retrieve_above": self._retrieve_above,
            "retriever": self._fitted_retriever,
        }
        if self._agreement_check is not None:
            state["agreement"] = self._agreement_check.to_dict()
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
        from ...errors import GateLoadError

        if state.get("combiner") is None and self.cold_start:
            return  # a cold start saved before any fit
        self._agreement_check = self._saved_agreement(directory, state)  # before self.columns is read
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
        from ...errors import GateLoadError

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

    def _saved_agreement(self, directory: Path, state: dict[str, Any]) -> AgreementCheck:
        """The saved agreement choice; a gate saved before the choice existed read the
        agreement columns (``GateLoadError`` naming a malformed field)."""
        from ...errors import GateLoadError

        if "agreement" not in state:
            return AgreementCheck(True, "saved before the agreement check: agreement read, as fitted")
        try:
            return AgreementCheck.from_dict(state["agreement"])
        except ValueError as exc:
            raise GateLoadError(f"{directory}: field 'state.agreement' {exc}") from None


#: The most wrappers (``wrapped``) looked through for the retriever they wrap.
MAX_WRAPPERS = 32


def retriever_kind(retriever: Retriever) -> str:
    """The class of the retriever searched, through memos that wrap one (``wrapped``).
    A chain of wrappers that comes back to one already seen, or runs past
    ``MAX_WRAPPERS``, stops there: the kind is that of the last wrapper reached."""
    seen: set[int] = set()
    while hasattr(retriever, "wrapped") and id(retriever) not in seen and len(seen) < MAX_WRAPPERS:
        seen.add(id(retriever))
        inner = retriever.wrapped
        if inner is None:
            break
        retriever = inner
    return type(retriever).__name__


class CheckedHits(tuple[Hit, ...]):
    """One question's passages as the gate reads them, with ``notes`` on what the
    retriever gave beyond that (more than ``k`` hits, hits without text)."""

    notes: tuple[str, ...] = ()


def checked_hits(hits: Iterable[object], k: int) -> CheckedHits:
    """The first ``k`` of ``hits`` that are passages with text (a ``Hit`` whose
    ``text`` is a str); what was cut or left out is in ``notes``. A retriever that
    gives more than asked, or passages without text, costs no decision."""
    first = list(itertools.islice(iter(hits), k + 1))
    notes = []
    if len(first) > k:
        notes.append(f"returned more than k={k} passages: the first {k} were kept")
        first = first[:k]
    kept = [hit for hit in first if isinstance(hit, Hit) and isinstance(hit.text, str)]
    if len(kept) < len(first):
        bad = [h for h in first if not (isinstance(h, Hit) and isinstance(h.text, str))]
        what = sorted({f"text {type(h.text).__name__}" if isinstance(h, Hit) else type(h).__name__ for h in bad})
        notes.append(f"returned {len(bad)} passages without text ({', '.join(what)}): left out")
    checked = CheckedHits(kept)
    checked.notes = tuple(notes)
    return checked


def _note_retriever_troubles(details: list[dict[str, Any]], found: Sequence[tuple[Hit, ...]]) -> None:
    """Each decision's details record what its retriever gave that was cut or left out."""
    for entry, hits in zip(details, found):
        notes = getattr(hits, "notes", ())
        if notes:
            entry["retriever_notes"] = list(notes)
