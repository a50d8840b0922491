"""A cascade: a cheap gate decides, and a costly one only where the cheap one is unsure.

``CascadeGate(cheap, costly, band=(lo, hi))`` scores every question with ``cheap``
(e.g. SKR-kNN, no LLM call) and escalates to ``costly`` (verbalized confidence,
SeaKR: LLM calls) only the questions whose cheap score lies in the closed band
[lo, hi]; the band can instead be fitted to a share of escalated questions
(``escalation_rate``, ``fit_band``). Each decision's details say which stage decided
(``stage``), the band, and both stages' scores and evidence; its ``llm_calls`` counts
the gating LLM calls the question cost (from the LLM-call listener events: the costly
gate's own per-question count when it reports one, else the batch's calls shared out;
SeaKR's generations are not chat requests and are not counted).

Need score (for ranking and calibration): the cheap score outside the band; inside it,
lo + (hi - lo)·σ(s_c - t_c), σ the logistic function and s_c, t_c the costly score and
threshold, so it stays between the cheap scores around it and is above the band's
midpoint exactly when the costly gate's score is above its threshold. Until the cascade
is calibrated, each stage decides by its own threshold (the decision's threshold is the
cheap one, or the band's midpoint when the costly stage decided); a question the costly
stage fails on is decided by the cheap stage (``details["costly_error"]`` says why).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from ..errors import GateLoadError, NotFittedError
from .base.assessment import Assessment, Verdict
from .base.constraints import Constraint, InstanceOf, Real
from .base.driving import adrive, drive
from .base.feedback import Feedback, FeedbackNotSupportedError
from .base.gate import Gate
from .base.listeners import listening
from .base.saved import save_member

logger = logging.getLogger(__name__)


class _CallCounter:
    """Counts the LLM requests reported while it listens (from any thread)."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def on_llm_call(self, event: object) -> None:
        with self._lock:
            self.calls += 1


@dataclass
class _Stage:
    """What one stage made of its questions, the LLM calls it took, and the error it
    raised (then its assessment holds no scores)."""

    judged: Assessment
    calls: int = 0
    error: str | None = None


@dataclass(frozen=True)
class _Ask:
    """A round of the cascade's scoring: ``gate``'s assessment of ``questions``."""

    gate: Gate
    questions: list[str]


#: The cascade's scoring as rounds, written once: it yields each stage's ``_Ask``, is
#: sent back that gate's assessment (or has the exception it raised thrown in), and
#: returns the combined assessment. ``_score`` drives it blocking, ``_ascore`` awaited.
_Stages = Generator[_Ask, Assessment, Assessment]


class _Band(Constraint):
    """A band ``(lo, hi)`` as ``_is_band`` takes it."""

    def is_satisfied_by(self, value: object) -> bool:
        return _is_band(value)

    def __str__(self) -> str:
        return "two finite numbers lo <= hi"


class CascadeGate(Gate):
    """Escalate from a cheap gate to a costly one inside an uncertainty band.

    Args:
        cheap: the gate that scores every question (fitted).
        costly: the gate asked for questions whose cheap score is in the band.
        band: ``(lo, hi)``: escalate when lo <= cheap score <= hi.
        escalation_rate: instead of ``band``: the share of questions to escalate; the
            band is then fitted by ``fit_band`` around the cheap gate's threshold.
        fallback_retrieve: the decision taken when a question or the cheap stage fails.
    """

    name = "cascade"
    member_params = frozenset({"cheap", "costly"})
    fitted_by = "fit_band(questions) with both stages fitted"
    _fitted_state = ("_fitted_band",)
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "cheap": InstanceOf(Gate, error=TypeError),
        "costly": InstanceOf(Gate, error=TypeError),
        "band": [_Band(), None],
        "escalation_rate": [Real(0, 1), None],
    }

    def __init__(
        self,
        cheap: Gate,
        costly: Gate,
        *,
        band: Sequence[float] | None = None,
        escalation_rate: float | None = None,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self.cheap = cheap
        self.costly = costly
        self.band = band
        self.escalation_rate = escalation_rate
        self._fitted_band: dict[str, Any] | None = None

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if (params["band"] is None) == (params["escalation_rate"] is None):
            raise ValueError("give either band=(lo, hi) or escalation_rate (a share of questions to escalate)")

    # ------------------------------------------------------------------ the band
    @property
    def band_(self) -> tuple[float, float] | None:
        """The band in use (``None``: escalate nothing)."""
        if self.band is not None:
            return float(self.band[0]), float(self.band[1])
        if self._fitted_band is None:
            raise NotFittedError("CascadeGate has no band: call fit_band(questions) or pass band=(lo, hi)")
        band = self._fitted_band["band"]
        return None if band is None else (float(band[0]), float(band[1]))

    def fit_band(self, questions: Sequence[str]) -> Self:
        """Fit the band to ``escalation_rate`` on questions like the traffic's."""
        return self.fit_band_scores(self.cheap.score(questions))

    def fit_band_scores(self, cheap_scores: np.ndarray) -> Self:
        """``fit_band`` from the cheap gate's scores: the band spans the
        ``escalation_rate`` share of them nearest the cheap threshold (ties at its edges
        can make the share escalated larger; ``fitted_band_["realised_share"]``)."""
        if self.escalation_rate is None:
            raise ValueError("this cascade has a fixed band; give escalation_rate instead of band to fit one")
        scores = np.asarray(cheap_scores, dtype=np.float64).ravel()
        if scores.size == 0 or not np.all(np.isfinite(scores)):
            raise ValueError("cheap scores must be a non-empty array of finite numbers")
        threshold = self.cheap.threshold_
        k = round(self.escalation_rate * scores.size)
        band = None
        if k:
            nearest = scores[np.argsort(np.abs(scores - threshold), kind="stable")[:k]]
            band = [float(nearest.min()), float(nearest.max())]
        share = float(np.mean((scores >= band[0]) & (scores <= band[1]))) if band else 0.0
        self._fitted_band = {
            "band": band,
            "n": int(scores.size),
            "escalation_rate": self.escalation_rate,
            "realised_share": share,
            "cheap_threshold": threshold,
        }
        logger.info("%s: band %s escalates %.3f of %d questions", self.name, band, share, scores.size)
        return self

    @property
    def fitted_band_(self) -> dict[str, Any] | None:
        """How the band was fitted (``None`` for a given band)."""
        return self._fitted_band

    # ------------------------------------------------------------------ Gate hooks
    @property
    def is_fitted(self) -> bool:
        return (
            self.cheap.is_fitted and self.costly.is_fitted and (self.band is not None or self._fitted_band is not None)
        )

    def _default_threshold(self) -> float:
        return self.cheap.threshold_

    def _score(self, questions: list[str]) -> Assessment:
        return drive(self._stages(questions), lambda ask: ask.gate.assess(ask.questions, listeners=self._listeners))

    async def _ascore(self, questions: list[str]) -> Assessment:
        return await adrive(
            self._stages(questions), lambda ask: ask.gate.aassess(ask.questions, listeners=self._listeners)
        )

    def _verdicts(
        self, scores: np.ndarray, threshold: float, evidence: list[dict[str, Any]], taken: list[Verdict | None]
    ) -> tuple[np.ndarray, np.ndarray]:
        if self._calibration is not None:  # one calibrated threshold on the combined scores
            return super()._verdicts(scores, threshold, evidence, taken)
        verdicts = [v for v in taken if v is not None]
        assert len(verdicts) == len(scores), "every judged question of a cascade has its stage's verdict"
        return (
            np.array([v.retrieve for v in verdicts], dtype=bool),
            np.array([v.threshold for v in verdicts], dtype=np.float64),
        )

    # ------------------------------------------------------------------ the stages
    def _stages(self, questions: list[str]) -> _Stages:
        """The cheap stage on every question, then the costly one on those in the band."""
        cheap = yield from self._stage(self.cheap, questions)
        if cheap.error is not None:
            raise RuntimeError(f"the cheap stage ({self.cheap.name}) failed: {cheap.error}")
        escalated = self._escalated(cheap.judged.scores)
        costly = (yield from self._stage(self.costly, [questions[i] for i in escalated])) if escalated else None
        return self._combine(cheap, escalated, costly)

    def _stage(self, gate: Gate, questions: list[str]) -> Generator[_Ask, Assessment, _Stage]:
        counter = _CallCounter()
        with listening(counter):  # open across the yield: it counts the driver's call to the gate
            try:
                judged = yield _Ask(gate, questions)
            except Exception as exc:  # a failing stage is decided around, not raised through
                return self._failed(gate, questions, counter, exc)
        return _Stage(judged, counter.calls)

    def _failed(self, gate: Gate, questions: list[str], counter: _CallCounter, exc: Exception) -> _Stage:
        logger.error("%s: the %s stage failed", self.name, gate.name, exc_info=exc)
        nothing = Assessment(np.full(len(questions), math.nan), [{} for _ in questions])
        return _Stage(nothing, counter.calls, _describe(exc))

    def _escalated(self, cheap_scores: np.ndarray) -> list[int]:
        band = self.band_
        if band is None:
            return []
        return [i for i, s in enumerate(cheap_scores) if band[0] <= s <= band[1]]

    def _combine(self, cheap: _Stage, escalated: list[int], costly: _Stage | None) -> Assessment:
        band = self.band_
        t_cheap = self.cheap.threshold_
        judged = cheap.judged
        finite = np.isfinite(judged.scores)
        cheap_retrieves = np.zeros(len(judged.scores), dtype=bool)
        cheap_retrieves[finite] = self.cheap.retrieves(judged.scores[finite], t_cheap)
        cheap_share = cheap.calls / max(len(judged.scores), 1)
        evidence = [
            {
                "stage": "cheap",
                "band": None if band is None else list(band),
                "cheap": {"gate": self.cheap.name, "score": float(score), "threshold": t_cheap, "details": details},
            }
            for score, details in zip(judged.scores, judged.details)
        ]
        combined = Assessment(
            judged.scores.copy(), evidence, drafts=list(judged.drafts), llm_calls=[cheap_share] * len(evidence)
        )
        for i in range(len(evidence)):
            reason = judged.reason(i)
            if reason is None:
                combined.verdicts[i] = Verdict(bool(cheap_retrieves[i]), t_cheap)
            else:
                combined.fallbacks[i] = judged.fallbacks[i] or "the cheap stage gave no score"
        if costly is not None:
            assert band is not None  # the costly stage runs on the band's questions only
            self._escalate(combined, escalated, costly, band)
        return combined

    def _escalate(self, combined: Assessment, escalated: list[int], costly: _Stage, band: tuple[float, float]) -> None:
        """Let the costly stage's verdicts replace the cheap ones for ``escalated``."""
        error = costly.error
        try:
            t_costly = self.costly.threshold_
        except NotFittedError as exc:
            error = f"{type(exc).__name__}: {exc}"
        lo, hi = band
        midpoint = (lo + hi) / 2
        judged = costly.judged
        calls = list(combined.llm_calls)
        for j, i in enumerate(escalated):
            score, details, entry = float(judged.scores[j]), judged.details[j], combined.details[i]
            counted = judged.llm_calls[j]
            calls[i] = (calls[i] or 0.0) + (costly.calls / len(escalated) if counted is None else counted)
            entry["costly"] = {
                "gate": self.costly.name,
                "score": score if math.isfinite(score) else None,
                "details": details,
            }
            failure = error or judged.fallbacks[j] or (None if math.isfinite(score) else "no score")
            if failure is not None:
                entry["costly_error"] = failure  # the cheap stage's verdict stands
                continue
            entry["costly"]["threshold"] = t_costly
            entry["stage"] = "costly"
            combined.fallbacks[i] = None  # the costly stage judged what the cheap one could not
            combined.scores[i] = lo + (hi - lo) / (1.0 + math.exp(-(score - t_costly)))
            combined.verdicts[i] = Verdict(bool(self.costly.retrieves(np.array([score]), t_costly)[0]), midpoint)
            if judged.drafts[j] is not None:
                combined.drafts[i] = judged.drafts[j]
        combined.llm_calls = calls

    # ------------------------------------------------------------------ feedback
    @property
    def learns_online(self) -> bool:
        return self.cheap.learns_online or self.costly.learns_online

    def record_feedback(self, question: str, retrieved: bool, correct: bool) -> Feedback:
        """Every stage that learns online learns from it; returns the first one's entry."""
        entries = [
            g.record_feedback(question, retrieved, correct) for g in (self.cheap, self.costly) if g.learns_online
        ]
        if not entries:
            raise FeedbackNotSupportedError(
                f"neither stage of this cascade ({self.cheap.name}, {self.costly.name}) learns from feedback"
            )
        return entries[0]

    def withdraw_feedback(self, entry: Feedback) -> None:
        """Every stage that learns online withdraws it (the second stage, which logged
        its own copy, the latest equal one)."""
        stages = [g for g in (self.cheap, self.costly) if g.learns_online]
        if not stages:
            super().withdraw_feedback(entry)
        for gate in stages:
            gate.withdraw_feedback(entry)

    # ------------------------------------------------------------------ persistence
    def _save_state(self, directory: Path) -> dict[str, Any]:
        return {
            "cheap": save_member(self.cheap, directory, "cheap"),
            "costly": save_member(self.costly, directory, "costly"),
            "fitted_band": self._fitted_band,
        }

    @classmethod
    def _from_saved(
        cls, path: Path, state: dict[str, Any], params: dict[str, Any], backends: dict[str, Any]
    ) -> CascadeGate:
        cheap = Gate.load_member(path, state.get("cheap"), "cheap stage", backends)
        costly = Gate.load_member(path, state.get("costly"), "costly stage", backends)
        return cls(cheap, costly, **params)

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        fitted = state.get("fitted_band")
        if fitted is None:
            if self.band is None:
                raise GateLoadError(f"{directory}: field 'state.fitted_band' is missing for a cascade without band")
            return
        band = fitted.get("band") if isinstance(fitted, dict) else "malformed"
        if band is not None and not _is_band(band):
            raise GateLoadError(f"{directory}: field 'state.fitted_band' is malformed: {fitted!r}")
        self._fitted_band = fitted


def _is_band(band: object) -> bool:
    return (
        isinstance(band, (list, tuple))
        and len(band) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in band)
        and band[0] <= band[1]
    )


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
