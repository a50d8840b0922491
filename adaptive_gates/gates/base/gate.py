"""What every gate shares: scoring, decisions, its threshold and calibration (for a
rate or for accuracy, ``adaptive_gates.gates.base.calibration``), feedback and listeners; saving
and loading are ``saved``'s functions, the parameter conventions ``params``'.

A subclass implements ``_score`` (an ``Assessment`` of a batch of clean questions:
need scores and evidence, and drafts, fallbacks or verdicts where it has them; a
plain ``(scores, details)`` pair when it has nothing else), ``_default_threshold``,
``is_fitted`` and its own state I/O (``_save_state``, ``_load_state``); it inherits
``score``, ``decide``, ``decide_batch``, ``adecide``, ``adecide_batch``, ``calibrate``,
``save``, ``load`` and the listeners. A gate that waits on a remote backend also
implements ``_ascore``, the awaitable ``_score``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

import numpy as np

from ...errors import BackendError, BackendMisconfiguredError, NotFittedError, StoreContentError
from ...persistence.saved_format import save_directory
from ...records.data import Hit, OutcomeRecord
from ...records.decision import GateDecision
from ...records.selfknowledge import Labels, labelled_records
from ...records.validation import check_batch, check_questions
from .assessment import Assessment, Verdict
from .batch import Batch, assemble_decisions, open_batch
from .calibration import Calibration, threshold_for_objective, threshold_for_rate
from .constraints import Boolean
from .feedback import Feedback, FeedbackNotSupportedError
from .fitted_on import FittedOn
from .listeners import Listener, check_listener, gate_asking, notify_decisions
from .params import (
    built_once,
    check_arguments,
    clone_of,
    estimator_tags,
    param_names,
    params_of,
    set_params_of,
    validating,
)
from .saved import load_member, load_saved, write_gate

if TYPE_CHECKING:
    from ...models.protocols import Embedder

logger = logging.getLogger(__name__)

#: What ``_score`` may return: an ``Assessment``, or ``(scores, details)`` alone.
Scored = Assessment | tuple[np.ndarray, list[dict[str, Any]]]

G = TypeVar("G", bound="Gate")
_T = TypeVar("_T")


class Gate(ABC):
    """Base class of every adaptive retrieval gate.

    A gate maps questions to *need scores* (higher = more need for retrieval) and
    retrieves when the score is strictly above ``threshold_``. ``decide`` never
    raises for a bad question or a failing backend: it returns the fallback
    decision (``fallback_retrieve``, default: retrieve) with ``error`` set, so a
    chain keeps working.
    """

    #: Short name used in decisions, reports, saved configs and the CLI.
    name: ClassVar[str] = "gate"
    #: Whether the gate's first LLM call is the answer itself (a confident decision
    #: carries it as ``draft_answer``, so answering costs no further call).
    answers_first: ClassVar[bool] = False
    #: Whether the gate retrieves for every question to decide (a decision to retrieve
    #: answers over those passages, ``GateDecision.passages``): one retrieval call per
    #: question, whatever it decides.
    retrieves_first: ClassVar[bool] = False
    #: Whether a decision depends on the decisions taken before it (a budget's window),
    #: so the same question, asked again, may be decided otherwise at the same score.
    decides_by_history: ClassVar[bool] = False
    #: Outcome-record fields ``score_records`` reads besides the question.
    record_fields: ClassVar[tuple[str, ...]] = ()
    #: How a gate of this class is fitted, as the errors of an unfitted one name it.
    fitted_by: ClassVar[str] = "fit(questions)"
    _registry: ClassVar[dict[str, type[Gate]]] = {}
    #: This gate's own listeners, replaced (never mutated) by ``add_listener`` and
    #: ``remove_listener`` so a decision in progress keeps the tuple it read.
    _listeners: tuple[Listener, ...] = ()
    _listeners_lock: ClassVar[threading.Lock] = threading.Lock()
    _parameter_constraints: ClassVar[dict[str, Any]] = {"fallback_retrieve": Boolean(error=TypeError)}
    # Parameters (``params``): attributes ``fit``/``load`` learn (the calibration is
    # always one), parameters fitted state does not depend on, parameters that are
    # backends (model objects: passed again at load, never saved) and those that are
    # member gates (cloned unfitted with the gate, saved in its directory).
    _fitted_state: ClassVar[tuple[str, ...]] = ("_calibration", "_fitted_on")
    _serving_params: ClassVar[frozenset[str]] = frozenset({"fallback_retrieve"})
    backend_params: ClassVar[frozenset[str]] = frozenset()
    member_params: ClassVar[frozenset[str]] = frozenset()
    #: Held while an object the gate builds on first use is built (``_built_once``):
    #: one per gate, so one gate loading its model never holds up another's.
    _build_lock: threading.Lock

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = validating(cls.__dict__["__init__"])  # type: ignore[method-assign]  # wrapped on purpose
        if "name" in cls.__dict__:
            Gate._registry[cls.name] = cls

    @staticmethod
    def gate_names() -> list[str]:
        """The names of every gate class known (those of the package and any subclass
        defined since), sorted: what ``gate_class``, saved configs and the CLI accept."""
        return sorted(Gate._registry)

    @staticmethod
    def gate_class(name: str) -> type[Gate]:
        """The gate class registered under ``name`` (``ValueError`` naming the known ones)."""
        cls = Gate._registry.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ValueError(f"unknown gate {name!r}; choose from {', '.join(Gate.gate_names())}")
        return cls

    @validating
    def __init__(self, *, fallback_retrieve: bool = True) -> None:
        self.fallback_retrieve = fallback_retrieve
        self._build_lock = threading.Lock()
        self._calibration: Calibration | None = None
        self._fitted_on: FittedOn | None = None

    # ----------------------------------------------------------------- parameters
    @classmethod
    def param_names(cls) -> list[str]:
        """The constructor parameters, in signature order."""
        return param_names(cls)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters by name (scikit-learn's ``get_params``)."""
        return params_of(self, deep)

    def set_params(self, **params: Any) -> Self:
        """Set constructor parameters (``name__param`` reaches a nested one), each
        validated as the constructor does before anything changes. Fitted state survives
        a change of serving parameters only (``adaptive_gates.gates.base.params``)."""
        if params:
            set_params_of(self, params)
        return self

    def __sklearn_clone__(self) -> Self:
        """An unfitted gate with the same parameters (``sklearn.base.clone``): member
        gates cloned, backends shared, the rest copied."""
        return clone_of(self)

    def __sklearn_tags__(self) -> Any:
        """What ``sklearn.utils.validation.check_is_fitted`` reads first."""
        return estimator_tags()

    @classmethod
    def _check_arguments(cls, params: dict[str, Any]) -> None:
        """Refuse constructor arguments that break the parameter tables (``params``)."""
        check_arguments(cls, params)

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        """Checks no table entry can make (parameters that depend on each other);
        ``params`` are the constructor's arguments, each of them already checked. None
        by default."""
        return None

    def _built_once(self, slot: str, build: Callable[[], _T]) -> _T:
        """The object in attribute ``slot``, built by ``build`` on first use, once
        whichever threads ask (``params.built_once``)."""
        return built_once(self, slot, build)

    def _given_or_default_encoder(self, given: Embedder | None) -> Embedder:
        """``given``, or the embedded all-MiniLM-L6-v2 built on first use into
        ``_default_encoder`` (``_built_once``): the sentence encoder of a gate given none."""
        return given if given is not None else self._built_once("_default_encoder", _default_embedder)

    # ----------------------------------------------------------------- subclass hooks
    @property
    @abstractmethod
    def is_fitted(self) -> bool:
        """True once the gate can score questions."""

    def __sklearn_is_fitted__(self) -> bool:
        """What ``sklearn.utils.validation.check_is_fitted`` asks: ``is_fitted``."""
        return self.is_fitted

    def fit_hint(self) -> str:
        """What to call to fit this gate, as its errors say it."""
        return f"call {self.fitted_by} or load() first"

    def fit(self, *args: Any, **kwargs: Any) -> Self:
        """Learn from questions (``fit(questions)``, with a label per question where the
        method needs one): gates that learn so override this. The others are ready as
        built or learn through a named verb (``fit_outcomes``, ``fit_band``), and say so
        here."""
        how = "it is ready as built" if self.is_fitted else self.fit_hint()
        raise NotImplementedError(f"{type(self).__name__} has no fit(); {how}")

    @abstractmethod
    def _score(self, questions: list[str]) -> Scored:
        """The assessment of validated questions (need scores and evidence, and what
        else the gate found: ``Assessment``). A question the gate cannot judge gets
        its reason in ``fallbacks`` and a NaN score, or one that stands for the
        fallback in ``score`` (the end of its scale the fallback decision is on), so
        composites and offline evaluation can still read a number."""

    async def _ascore(self, questions: list[str]) -> Scored:
        """``_score`` awaited; by default in a worker thread, so the event loop is never
        blocked. Gates that wait on a remote backend await it natively instead."""
        return await asyncio.to_thread(self._score, questions)

    @abstractmethod
    def _default_threshold(self) -> float:
        """The method's own threshold, used until the gate is calibrated."""

    def retrieves(self, scores: np.ndarray, threshold: float | None = None) -> np.ndarray:
        """Which need scores retrieve at ``threshold`` (default: the current one).

        ``decide_batch`` reads the threshold once and passes it here, so a decision
        never mixes two thresholds while another thread calibrates the gate or
        grows its memory. Subclasses with tie rules override this and must decide
        by the ``threshold`` given, never by reading ``threshold_`` again.
        """
        return np.asarray(scores) > (self.threshold_ if threshold is None else threshold)

    def fit_outcomes(
        self,
        records: Sequence[OutcomeRecord],
        metric: str = "contains",
        *,
        labels: Labels = "gold",
        sources: Sequence[str] = (),
        **options: Any,
    ) -> Self:
        """Fit on outcome records, graded against their gold answers (``labels="gold"``)
        or against the answer with retrieval (``"agreement"``: no gold answer needed,
        ``selfknowledge.agreement_records``), and record what was fitted on
        (``fitted_on_``: the records' model, count, labels and ``sources``, e.g. the
        files they came from). ``options`` are the method's own (SKR's ``ties``)."""
        records = list(records)
        self._fit_outcomes(labelled_records(records, labels), metric, **options)
        self._fitted_on = FittedOn.from_records(records, metric, labels, sources)
        return self

    def _fit_outcomes(self, records: list[OutcomeRecord], metric: str) -> None:
        """Learn from graded outcome records; gates that learn from them override this."""
        how = "it is ready as built" if self.is_fitted else self.fit_hint()
        raise NotImplementedError(f"{type(self).__name__} does not learn from outcome records; {how}")

    @property
    def fitted_on_(self) -> FittedOn | None:
        """The outcome records the gate was fitted on (``None``: fitted otherwise, e.g.
        on labelled questions, or saved before gates recorded it)."""
        return self._fitted_on

    # ----------------------------------------------------------------- threshold
    @property
    def threshold_(self) -> float:
        """The calibrated threshold if any, else the method's own."""
        self._check_fitted()
        if self._calibration is not None:
            return self._calibration.threshold
        return self._default_threshold()

    @property
    def calibration_(self) -> Calibration | None:
        """How the threshold was calibrated (``None``: the method's own rule)."""
        return self._calibration

    def threshold_at_rate(self, rate: float) -> float:
        """The threshold that would have retrieved about ``rate`` of the questions this
        gate was calibrated on (either kind of calibration keeps a sample of their
        scores): how a service honours a per-request retrieval budget without scoring
        anything again. An uncalibrated gate raises ``ValueError``."""
        self._check_fitted()
        if self._calibration is None:
            raise ValueError(
                f"{self.name} is not calibrated: a threshold for a rate is read from the scores of the "
                "questions it was calibrated on; call gate.calibrate(questions, ...) first"
            )
        return self._calibration.threshold_at_rate(rate)

    def reset_threshold(self) -> Self:
        """Drop any calibration and go back to the method's own rule."""
        self._calibration = None
        return self

    def calibrate(
        self,
        questions: Sequence[str],
        target_rate: float | None = None,
        *,
        correct_without: Sequence[float] | None = None,
        correct_with: Sequence[float] | None = None,
        max_rate: float | None = None,
    ) -> Self:
        """Fit the threshold on held-out questions.

        Either give ``target_rate`` (the share of questions that should retrieve;
        no labels needed), or give per-question correctness without and with
        retrieval to maximise accuracy, optionally under ``max_rate``. Fewer than
        ``MIN_CALIBRATION_QUESTIONS`` (20) questions draw a ``CalibrationWarning``.
        """
        return self.calibrate_scores(
            self.score(questions),
            target_rate,
            correct_without=correct_without,
            correct_with=correct_with,
            max_rate=max_rate,
        )

    def calibrate_scores(
        self,
        scores: np.ndarray,
        target_rate: float | None = None,
        *,
        correct_without: np.ndarray | Sequence[float] | None = None,
        correct_with: np.ndarray | Sequence[float] | None = None,
        max_rate: float | None = None,
    ) -> Self:
        """``calibrate`` from need scores already computed, e.g. out-of-fold
        scores of cross-fitted copies of this gate."""
        self._check_fitted()
        with_outcomes = correct_without is not None or correct_with is not None
        if with_outcomes == (target_rate is not None):
            raise ValueError("give either target_rate or correct_without and correct_with")
        if target_rate is not None:
            if max_rate is not None:
                raise ValueError("max_rate applies to outcome calibration only")
            calibration = threshold_for_rate(scores, target_rate)
        else:
            if correct_without is None or correct_with is None:
                raise ValueError("outcome calibration needs both correct_without and correct_with")
            calibration = threshold_for_objective(scores, correct_without, correct_with, max_rate)
        self._calibration = calibration
        logger.info("%s calibrated: %s", self.name, calibration)
        calibration.warn_if_too_few()
        return self

    # ----------------------------------------------------------------- saving
    #: Parameters renamed since a gate of this class was saved: old name -> new name.
    _renamed_params: ClassVar[dict[str, str]] = {}

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Save the fitted gate to a directory of JSON and arrays (no pickle)."""
        self._check_fitted()
        return save_directory(path, self._write, overwrite=overwrite)

    def _write(self, directory: Path) -> None:
        """Write the fitted gate into the empty ``directory`` (``saved.write_gate``): a
        gate whose decisions must hold still while it is written overrides this."""
        write_gate(self, directory)

    @classmethod
    def load(cls, path: str | Path, **backends: Any) -> Self:
        """Load a gate saved by ``save``; backends (e.g. ``embedder=``) are passed
        to the constructor. Refuses a gate of another type or a mismatched backend."""
        return load_saved(cls, Path(path), backends)

    @classmethod
    def load_member(cls, directory: Path, state: object, what: str, backends: dict[str, Any]) -> Self:
        """A gate of this class saved as a member of the gate saved in ``directory``
        (``saved.load_member``; ``what`` names it in errors)."""
        return load_member(cls, directory, state, what, backends)

    def _json_params(self) -> dict[str, Any]:
        """The constructor parameters to save: all but the backends and member gates
        (JSON values; the members are saved as part of the state)."""
        objects = self.backend_params | self.member_params
        return {k: v for k, v in self.get_params(deep=False).items() if k not in objects}

    @classmethod
    def _current_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Saved parameters under their current names (a gate saved before a rename loads)."""
        return {cls._renamed_params.get(name, name): value for name, value in params.items()}

    @classmethod
    def _from_saved(cls, path: Path, state: dict[str, Any], params: dict[str, Any], backends: dict[str, Any]) -> Self:
        """The gate ``load`` restores the state into, from its saved parameters and the
        backends given; a gate holding other gates (saved in its directory) loads them here."""
        return cls(**backends, **params)

    @abstractmethod
    def _save_state(self, directory: Path) -> dict[str, Any]:
        """Write the fitted state's files into ``directory``; return its JSON part."""

    @abstractmethod
    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        """Restore the fitted state written by ``_save_state``."""

    # ----------------------------------------------------------------- feedback
    @property
    def learns_online(self) -> bool:
        """Whether ``record_feedback`` updates this gate (see ``adaptive_gates.gates.base.feedback``)."""
        return False

    def record_feedback(self, question: str, retrieved: bool, correct: bool) -> Feedback:
        """Learn from one answered question: was it answered with retrieval, and was
        the answer correct. Gates that learn online override this (and ``learns_online``)."""
        raise FeedbackNotSupportedError(
            f"{type(self).__name__} does not learn from feedback (learns_online is False); "
            "the SKR gates do: put their decisions' outcomes into one of those"
        )

    def withdraw_feedback(self, entry: Feedback) -> None:
        """Undo one observation ``record_feedback`` returned. Gates that learn online
        override this."""
        raise FeedbackNotSupportedError(f"{type(self).__name__} learns no feedback: it holds none to take back")

    def record_decision_feedback(self, decision: GateDecision, correct: bool) -> Feedback:
        """``record_feedback`` for a decision taken (by this gate or one it stands in
        for): the question it judged, and whether the answer was made with retrieval.

        This is how a framework run's answer teaches the gate: the run carries its
        decision, the caller judges the answer.

        Raises:
            ValueError: the decision does not carry the question it judged.
            FeedbackNotSupportedError: this gate does not learn from feedback.
        """
        if not isinstance(decision, GateDecision):
            raise ValueError(f"decision must be a GateDecision, got {type(decision).__name__}")
        if decision.question is None:
            raise ValueError("the decision does not carry the question it judged, so it cannot teach the gate")
        return self.record_feedback(decision.question, decision.retrieve, correct)

    def record_judged_feedback(
        self, decision: GateDecision, correct: bool, draft_correct: bool | None = None
    ) -> list[Feedback]:
        """Learn from a judge's verdicts (an evaluator's, a person's) on what ``decision``
        served: the answer (``record_decision_feedback``) and, when the answer was made
        with retrieval and the answer without it (the decision's
        ``answer_without_retrieval``, or one the caller asked for) was judged too, that
        one as an answer without retrieval. A right one then teaches that retrieval was
        not needed (a known label); a wrong one that it was (unknown), or nothing when
        both were wrong (``adaptive_gates.gates.base.feedback``'s rule). Returns the observations
        logged, the answer's first.

        Raises:
            ValueError: the decision does not carry the question it judged.
            FeedbackNotSupportedError: this gate does not learn from feedback.
        """
        taught = [self.record_decision_feedback(decision, correct)]
        if decision.retrieve and draft_correct is not None:
            assert decision.question is not None  # checked by record_decision_feedback
            taught.append(self.record_feedback(decision.question, retrieved=False, correct=draft_correct))
        return taught

    # ----------------------------------------------------------------- fitted state
    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise self._not_fitted()

    def _not_fitted(self) -> NotFittedError:
        return NotFittedError(f"{type(self).__name__} is not fitted: {self.fit_hint()}")

    def _fitted_value(self, value: _T | None) -> _T:
        """``value``, a part of the fitted state, or ``NotFittedError`` while the gate has
        none: what the code of a fitted gate reads as set."""
        if value is None:
            raise self._not_fitted()
        return value

    # ----------------------------------------------------------------- scoring
    def score(self, questions: Sequence[str]) -> np.ndarray:
        """Need scores for a batch of questions (higher = retrieve first).

        Raises ``InvalidQuestionError`` for a bad question and ``BackendError``
        when the backend yields a non-finite score.
        """
        self._check_fitted()
        clean = check_questions(questions)
        if not clean:
            return np.zeros(0, dtype=np.float64)
        scores = self.assess(clean).scores
        if not np.all(np.isfinite(scores)):
            raise BackendError(f"{self.name}: the backend produced a non-finite score")
        return scores

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """This gate's own listeners (``add_listener``), in the order added."""
        return self._listeners

    def assess(self, questions: list[str], *, listeners: Sequence[Listener] = ()) -> Assessment:
        """The assessment of validated questions (``check_questions``), before any
        decision: what a composite gate reads of the gates it holds. Every LLM call
        goes to ``listeners`` (the composite's own) and this gate's listeners."""
        with gate_asking(self.name, (*listeners, *self._listeners)):
            return Assessment.of(self._score(questions))

    async def aassess(self, questions: list[str], *, listeners: Sequence[Listener] = ()) -> Assessment:
        """``assess`` awaited (``_ascore``: a remote backend awaited, in-process work
        in a worker thread)."""
        with gate_asking(self.name, (*listeners, *self._listeners)):
            return Assessment.of(await self._ascore(questions))

    def score_records(self, records: Sequence[OutcomeRecord]) -> np.ndarray:
        """Need scores of outcome records, for offline evaluation: by default the
        scores of their questions. A gate that can score what a record holds (e.g.
        the recorded log-probabilities of its answer) overrides this and names the
        fields it reads in ``record_fields``."""
        return self.score([r.question for r in records])

    # ----------------------------------------------------------------- decisions
    def fallback_decision(
        self,
        question: Any,
        error: str,
        threshold: float = math.nan,
        latency_ms: float = 0.0,
        details: dict[str, Any] | None = None,
        llm_calls: float | None = None,
        answer_without_retrieval: str | None = None,
        passages: tuple[Hit, ...] | None = None,
    ) -> GateDecision:
        """This gate's fallback decision on ``question``, with why (logged as a warning):
        what ``decide`` gives when a question or the backend fails, and what a framework
        gives when the gate itself raised."""
        logger.warning("%s: fallback decision (%s)", self.name, error)
        return GateDecision.fallback(
            question,
            self.name,
            self.fallback_retrieve,
            error,
            threshold=threshold,
            latency_ms=latency_ms,
            details=details,
            llm_calls=llm_calls,
            answer_without_retrieval=answer_without_retrieval,
            passages=passages,
        )

    def retaken_at(self, decision: GateDecision, threshold: float) -> GateDecision:
        """``decision`` (one of this gate's) taken again at ``threshold`` by this gate's
        own rule (``retrieves``, tie rules included): how a per-request threshold
        applies. A fallback keeps its verdict; where the verdict is "answer directly",
        the draft the gate wrote is served, as ``decide`` at that threshold would."""
        if decision.is_fallback:
            return dataclasses.replace(decision, threshold=threshold)
        retrieve = bool(self.retrieves(np.array([decision.score]), threshold)[0])
        return dataclasses.replace(
            decision,
            retrieve=retrieve,
            threshold=threshold,
            draft_answer=None if retrieve else decision.answer_without_retrieval,
        )

    def decide(self, question: str) -> GateDecision:
        """Decide one question; see ``decide_batch``."""
        return self.decide_batch([question])[0]

    def decide_batch(self, questions: Sequence[str]) -> list[GateDecision]:
        """Decide a batch in one scoring call.

        Bad questions and backend failures give fallback decisions with ``error``
        set instead of exceptions; ``latency_ms`` is the batch's time per question.
        A backend that cannot serve the gate at all (``BackendMisconfiguredError``,
        e.g. one that gives no log-probabilities to a gate that reads them) raises:
        that is a setting to fix, which a fallback on every question would hide.
        A batch that is not a sequence of questions (a single string, ``None``)
        raises ``InvalidQuestionError``. The threshold is read once, before any
        scoring (a gate without one fails at once), and every decision of the
        batch is taken and recorded with it. Every decision goes to the listeners.
        """
        batch = self._open_batch(questions)
        scored: Assessment | Exception | None
        try:
            scored = self.assess(batch.to_score) if batch.to_score else None
        except BackendMisconfiguredError:
            raise  # no question could be scored: a fallback on each would hide it
        except Exception as exc:  # a failing backend must not take the chain down
            scored = exc
        return self._close_batch(batch, scored)

    async def adecide(self, question: str) -> GateDecision:
        """``decide`` awaited; see ``adecide_batch``."""
        return (await self.adecide_batch([question]))[0]

    async def adecide_batch(self, questions: Sequence[str]) -> list[GateDecision]:
        """``decide_batch`` awaited: the same decisions, scored by ``_ascore``, which
        awaits a remote backend's replies and runs in-process work in a worker thread,
        so the event loop is never blocked."""
        batch = self._open_batch(questions)
        scored: Assessment | Exception | None
        try:
            scored = await self.aassess(batch.to_score) if batch.to_score else None
        except BackendMisconfiguredError:
            raise  # as in decide_batch
        except Exception as exc:  # a failing backend must not take the chain down
            scored = exc
        return self._close_batch(batch, scored)

    def _open_batch(self, questions: Sequence[str]) -> Batch:
        """A batch checked and ready to score, with the threshold it is decided by."""
        items = check_batch(questions)
        self._check_fitted()
        return open_batch(items, self.threshold_, time.perf_counter())

    def _close_batch(self, batch: Batch, scored: Assessment | Exception | None) -> list[GateDecision]:
        """The decisions of a batch from the assessment of its clean questions (or the
        exception scoring them raised; ``assemble_decisions``), logged and sent to the
        listeners."""
        if isinstance(scored, Exception):
            # a store holding foreign entries is a setup to fix, not a bug to trace
            trace = None if isinstance(scored, StoreContentError) else scored
            logger.error("%s: scoring failed: %s", self.name, scored, exc_info=trace)
        latency = (time.perf_counter() - batch.start) * 1000 / max(len(batch.questions), 1)
        decisions = assemble_decisions(
            batch,
            scored,
            gate=self.name,
            fallback_retrieve=self.fallback_retrieve,
            verdicts=self._verdicts,
            latency_ms=latency,
        )
        for decision in decisions:
            if decision.is_fallback:
                logger.warning("%s: fallback decision (%s)", self.name, decision.error)
        notify_decisions(decisions, self._listeners)
        return decisions

    def _verdicts(
        self, scores: np.ndarray, threshold: float, evidence: list[dict[str, Any]], taken: list[Verdict | None]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Whether each judged score of a batch retrieves, and the threshold each was
        decided by: ``retrieves`` at the batch's threshold. A gate whose decisions are
        not one fixed threshold (a budget; a cascade, whose stages took ``taken``)
        overrides this; it may add to each question's ``evidence``."""
        return self.retrieves(scores, threshold), np.full(len(scores), threshold)

    # ----------------------------------------------------------------- listeners
    def add_listener(self, listener: Listener) -> None:
        """Send every later decision of this gate, and every LLM call it makes, to
        ``listener`` (an object with ``on_decision`` and/or ``on_llm_call``; see
        ``adaptive_gates.gates.base.listeners``)."""
        check_listener(listener)
        with self._listeners_lock:
            self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop sending to ``listener``; ``ValueError`` when it was not added."""
        with self._listeners_lock:
            if listener not in self._listeners:
                raise ValueError(f"{listener!r} is not a listener of this {type(self).__name__}")
            kept = list(self._listeners)
            kept.remove(listener)
            self._listeners = tuple(kept)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self._json_params().items())
        return f"{type(self).__name__}({params})"


def _default_embedder() -> Embedder:
    from ...models.defaults import default_embedder  # loads a model: only when a gate needs it

    return default_embedder()


def load_gate(path: str | Path, **backends: Any) -> Gate:
    """Load any saved gate; its type comes from the saved ``config.json``."""
    return Gate.load(path, **backends)
