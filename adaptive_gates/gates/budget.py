"""A retrieval budget held at run time, over any gate.

``BudgetedGate(gate, target_rate=0.3)`` retrieves for at most ``target_rate`` of the
last ``window`` decisions, whatever the traffic, and says when the traffic's need
scores drift from those it was calibrated on. It is a gate itself, so it goes
wherever a gate goes (routers, selectors, evaluation).

Rule, per decision, with the score s of the wrapped gate:

- **quantile**: s retrieves when it is above the running (1 - target_rate) quantile q
  of the window's scores (the ``window`` scores decided before it): q is the smallest
  of them with at most target_rate·n of them above it. A score equal to q (need scores
  are often discrete, e.g. a kNN vote) retrieves for the share of ties that brings the
  window to the target, spread over the ties by error diffusion (deterministic).
- **warm-up**: until traffic fills the window, quantiles of the calibration scores
  (``calibrate``) fill the rest of it, so the first decision is already at the target;
  without calibration, the wrapped gate's own threshold decides until ``min_scores``
  scores have been seen.
- **catch-up**: budget the window left unspent lowers the quantile (taken at
  target_rate + 8·unspent/window, unspent = target_rate·n - retrievals among the
  window's n decisions), so refusals by the cap and a lagging quantile are made up.
- **cap**: a retrieval that would put more than floor(target_rate·window) retrievals
  among the last ``window`` decisions is refused. The quantile follows the traffic
  only as fast as the window turns over; the cap holds the budget meanwhile.
- **override**: ``decide(question, retrieval="always" | "never")`` (the values of the
  LangChain package's ``gate_retrieval``) is not scored and stays outside the budget.

Drift: once the window is full, the two-sample Kolmogorov-Smirnov statistic D between
its scores and the calibration scores (without calibration: the first full window of
traffic) is compared with the critical value at α = 0.001,
1.949·sqrt((n + m) / (n·m)), or with ``drift_threshold`` when given. Above it the
decision's ``details["budget"]["drift"]`` is true, and a warning is logged when the
drift starts (an info when it ends): the budget still holds, but the gate's scores
no longer mean what they meant at calibration; recalibrate or refit it.
"""

from __future__ import annotations

import logging
import math
import threading
import warnings
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from ..errors import GateLoadError
from ..persistence.saved_format import load_array, save_array
from ..records.decision import GateDecision, RetrievalMode, check_retrieval_mode
from ..records.validation import check_batch
from .base.assessment import Assessment, Verdict
from .base.calibration import MIN_CALIBRATION_QUESTIONS, CalibrationWarning
from .base.constraints import InstanceOf, Integer, Real
from .base.feedback import Feedback
from .base.gate import Gate
from .base.listeners import notify_decisions
from .base.saved import save_member

logger = logging.getLogger(__name__)

#: The drift test's significance level, and its Kolmogorov-Smirnov coefficient c(α).
DRIFT_ALPHA = 0.001
_KS_COEFFICIENT = math.sqrt(-math.log(DRIFT_ALPHA / 2) / 2)
#: A drift ends once the statistic falls below this share of the limit.
_DRIFT_END = 0.8
#: How hard unspent budget pulls the quantile down: the quantile is taken at
#: target_rate + _CATCH_UP·(unspent retrievals)/window (measured on a shifting stream:
#: 1 left the realised rate 1.6 points under a 0.30 target, 8 left it 0.4 under).
_CATCH_UP = 8.0
_REFERENCE_FILE, _SCORES_FILE, _RETRIEVED_FILE = "budget_reference.npy", "budget_scores.npy", "budget_retrieved.npy"


def ks_statistic(reference: np.ndarray, sample: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two
    empirical distribution functions (``reference`` sorted)."""
    sample = np.sort(sample)
    values = np.concatenate([reference, sample])
    gap = np.searchsorted(reference, values, "right") / len(reference) - np.searchsorted(sample, values, "right") / len(
        sample
    )
    return float(np.max(np.abs(gap)))


class BudgetedGate(Gate):
    """Any gate held to a retrieval budget over a sliding window (see the module's rule).

    Args:
        gate: the (fitted) gate whose need scores are ranked.
        target_rate: the largest share of the last ``window`` decisions that retrieve.
        window: the number of recent decisions the budget (and drift test) covers.
        min_scores: scores needed before the quantile decides, without calibration.
        drift_threshold: the KS statistic above which traffic counts as drifted
            (default: the critical value at α = 0.001 for the two sample sizes).
        fallback_retrieve: the decision taken when a question or the backend fails.
    """

    name = "budget"
    member_params = frozenset({"gate"})
    decides_by_history = True
    _serving_params = frozenset({"fallback_retrieve", "target_rate", "drift_threshold"})
    _fitted_state = ("_reference",)
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "gate": InstanceOf(Gate, error=TypeError),
        "target_rate": Real(0, 1),
        "window": Integer(2),
        "min_scores": Integer(1),
        "drift_threshold": [Real(0, 1, closed="right"), None],
    }

    def __init__(
        self,
        gate: Gate,
        *,
        target_rate: float,
        window: int = 200,
        min_scores: int = 20,
        drift_threshold: float | None = None,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self.gate = gate
        self.target_rate = target_rate
        self.window = window
        self.min_scores = min_scores
        self.drift_threshold = drift_threshold
        self._lock = threading.RLock()
        self._reference: np.ndarray | None = None  # sorted calibration scores
        self._scores: deque[float] = deque(maxlen=window)
        self._retrieved: deque[bool] = deque(maxlen=window)
        self._credit = 0.0  # error diffusion of the ties' share
        self._drift = False

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if params["min_scores"] > params["window"]:
            raise ValueError(f"min_scores ({params['min_scores']}) must not exceed window ({params['window']})")

    # ------------------------------------------------------------------ Gate hooks
    @property
    def is_fitted(self) -> bool:
        return self.gate.is_fitted

    def fit_hint(self) -> str:
        return f"fit its gate ({self.gate.fit_hint()})"

    def _score(self, questions: list[str]) -> Assessment:
        return self.gate.assess(questions, listeners=self._listeners)

    async def _ascore(self, questions: list[str]) -> Assessment:
        return await self.gate.aassess(questions, listeners=self._listeners)

    def _default_threshold(self) -> float:
        """The threshold the next decision would use (ties aside)."""
        with self._lock:
            pool = self._pool()
            return self.gate.threshold_ if len(pool) < self.min_scores else _quantile(pool, self.target_rate)[0]

    def _verdicts(
        self, scores: np.ndarray, threshold: float, evidence: list[dict[str, Any]], taken: list[Verdict | None]
    ) -> tuple[np.ndarray, np.ndarray]:
        retrieve, thresholds = np.zeros(len(scores), dtype=bool), np.zeros(len(scores))
        with self._lock:
            for i, (score, details) in enumerate(zip(scores, evidence)):
                retrieve[i], thresholds[i], details["budget"] = self._decide_one(float(score))
        return retrieve, thresholds

    # ------------------------------------------------------------------ the budget
    @property
    def window_rate_(self) -> float | None:
        """The share of the window's decisions that retrieved (``None``: none yet)."""
        with self._lock:
            return sum(self._retrieved) / len(self._retrieved) if self._retrieved else None

    @property
    def drift_(self) -> bool:
        """Whether the window's scores have drifted from the calibration scores."""
        return self._drift

    def _pool(self) -> np.ndarray:
        """The window's scores, with quantiles of the calibration scores in the part
        traffic has not filled yet."""
        traffic = np.fromiter(self._scores, dtype=np.float64, count=len(self._scores))
        missing = self.window - len(traffic)
        if missing <= 0 or self._reference is None:
            return traffic
        spread = np.linspace(0, len(self._reference) - 1, missing).round().astype(int)
        return np.concatenate([traffic, self._reference[spread]])

    def _decide_one(self, score: float) -> tuple[bool, float, dict[str, Any]]:
        pool = self._pool()
        warmup = len(pool) < self.min_scores
        if warmup:
            threshold, tie_share = self.gate.threshold_, None
            retrieve = bool(self.gate.retrieves(np.array([score]), threshold)[0])
        else:
            # The budget left unspent in the window (refused by the cap, lost to a lagging
            # quantile) lowers the quantile; an overspent one raises it.
            unspent = _CATCH_UP * (self.target_rate * len(self._retrieved) - sum(self._retrieved)) / self.window
            threshold, tie_share = _quantile(pool, float(np.clip(self.target_rate + unspent, 0.0, 1.0)))
            retrieve = score > threshold
            if score == threshold and tie_share > 0:
                self._credit += tie_share
                retrieve = self._credit >= 1 - 1e-9
                self._credit = max(self._credit - retrieve, 0.0)
        allowed = math.floor(self.target_rate * self.window + 1e-9)
        recent = sum(self._retrieved) - (self._retrieved[0] if len(self._retrieved) == self.window else 0)
        capped = retrieve and recent + 1 > allowed
        retrieve = retrieve and not capped
        self._scores.append(score)
        self._retrieved.append(retrieve)
        details = {
            "gate": self.gate.name,
            "target_rate": self.target_rate,
            "threshold": threshold,
            "tie_share": tie_share,
            "warmup": warmup,
            "capped": capped,
            "window": len(self._retrieved),
            "window_rate": sum(self._retrieved) / len(self._retrieved),
            **self._check_drift(),
        }
        return retrieve, threshold, details

    def _check_drift(self) -> dict[str, Any]:
        """The drift test on a full window (see the module's docstring)."""
        if len(self._scores) < self.window:
            return {"drift": self._drift, "drift_statistic": None, "drift_threshold": None}
        window = np.fromiter(self._scores, dtype=np.float64, count=len(self._scores))
        if self._reference is None:
            logger.info("%s: no calibration scores; the first full window of traffic is the drift reference", self.name)
            self._reference = np.sort(window)
        n, m = len(self._reference), len(window)
        limit = self.drift_threshold or _KS_COEFFICIENT * math.sqrt((n + m) / (n * m))
        statistic = ks_statistic(self._reference, window)
        # Hysteresis: a drift ends only well below the limit, so a statistic hovering
        # at it does not flap the flag (and the warning) on and off.
        drift = statistic > (limit * _DRIFT_END if self._drift else limit)
        if drift and not self._drift:
            logger.warning(
                "%s: the need scores of %s drifted from its calibration scores (KS D=%.3f > %.3f over the last %d "
                "decisions); the budget holds, but recalibrate or refit the gate on questions like the traffic's",
                self.name,
                self.gate.name,
                statistic,
                limit,
                m,
            )
        elif self._drift and not drift:
            logger.info("%s: the need scores are back in line with the calibration (KS D=%.3f)", self.name, statistic)
        self._drift = drift
        return {"drift": drift, "drift_statistic": statistic, "drift_threshold": limit}

    # ------------------------------------------------------------------ calibration
    def calibrate_scores(
        self,
        scores: np.ndarray,
        target_rate: float | None = None,
        *,
        correct_without: np.ndarray | Sequence[float] | None = None,
        correct_with: np.ndarray | Sequence[float] | None = None,
        max_rate: float | None = None,
    ) -> Self:
        """Keep the need scores of calibration questions (like the traffic's) as the
        warm-up quantiles and the drift reference. The budget is the ``target_rate``
        parameter, which fitting never changes: a ``target_rate`` given here must be it
        (``set_params(target_rate=...)`` changes it and keeps this calibration)."""
        if correct_without is not None or correct_with is not None or max_rate is not None:
            raise ValueError(
                "a budgeted gate's threshold follows its target rate; calibrate the wrapped gate on "
                "outcomes before wrapping it, and give the budget only questions (and a target_rate)"
            )
        reference = np.asarray(scores, dtype=np.float64).ravel()
        if reference.size == 0 or not np.all(np.isfinite(reference)):
            raise ValueError("calibration scores must be a non-empty array of finite numbers")
        if target_rate is not None and target_rate != self.target_rate:
            raise ValueError(
                f"this budget's rate is its target_rate parameter ({self.target_rate}), which calibrating does "
                f"not change; call set_params(target_rate={target_rate}) for another (it keeps the calibration)"
            )
        with self._lock:
            self._reference = np.sort(reference)
            self._drift = False
        if reference.size < MIN_CALIBRATION_QUESTIONS:
            warnings.warn(
                f"budget calibrated on {reference.size} scores, fewer than {MIN_CALIBRATION_QUESTIONS}: "
                "its warm-up quantiles and drift reference are rough",
                CalibrationWarning,
                stacklevel=2,
            )
        logger.info("%s: %d calibration scores kept (target rate %.3f)", self.name, reference.size, self.target_rate)
        return self

    # ------------------------------------------------------------------ per-request override
    def decide(self, question: str, *, retrieval: RetrievalMode = "auto") -> GateDecision:
        """Decide one question under the budget; ``retrieval="always"``/``"never"``
        forces the decision without scoring it (outside the budget)."""
        return self.decide_batch([question], retrieval=retrieval)[0]

    def decide_batch(self, questions: Sequence[str], *, retrieval: RetrievalMode = "auto") -> list[GateDecision]:
        """``Gate.decide_batch`` under the budget, or forced for the whole batch."""
        if check_retrieval_mode(retrieval) != "auto":
            return self._forced(questions, retrieval)
        return super().decide_batch(questions)

    async def adecide(self, question: str, *, retrieval: RetrievalMode = "auto") -> GateDecision:
        """``decide`` awaited."""
        return (await self.adecide_batch([question], retrieval=retrieval))[0]

    async def adecide_batch(self, questions: Sequence[str], *, retrieval: RetrievalMode = "auto") -> list[GateDecision]:
        """``decide_batch`` awaited."""
        if check_retrieval_mode(retrieval) != "auto":
            return self._forced(questions, retrieval)
        return await super().adecide_batch(questions)

    def _forced(self, questions: Sequence[str], retrieval: RetrievalMode) -> list[GateDecision]:
        """Decisions forced by the request (``GateDecision.forced``), outside the budget."""
        decisions = [GateDecision.forced(q, self.name, retrieval) for q in check_batch(questions)]
        notify_decisions(decisions, self._listeners)
        return decisions

    # ------------------------------------------------------------------ feedback
    @property
    def learns_online(self) -> bool:
        return self.gate.learns_online

    def record_feedback(self, question: str, retrieved: bool, correct: bool) -> Feedback:
        """The wrapped gate learns from the feedback; the budget ranks its new scores."""
        return self.gate.record_feedback(question, retrieved, correct)

    def withdraw_feedback(self, entry: Feedback) -> None:
        """The wrapped gate takes the feedback back."""
        self.gate.withdraw_feedback(entry)

    # ------------------------------------------------------------------ persistence
    def _write(self, directory: Path) -> None:
        """Save the wrapped gate with the calibration scores and the live window, so a
        restarted service keeps its budget. Decisions wait while it is written (as the
        gate saved, or as a member of another)."""
        with self._lock:
            super()._write(directory)

    def _save_state(self, directory: Path) -> dict[str, Any]:
        state = {
            "gate": save_member(self.gate, directory, "gate"),
            "credit": self._credit,
            "drift": self._drift,
            "reference": self._reference is not None,
        }
        if self._reference is not None:
            save_array(directory, _REFERENCE_FILE, self._reference)
        save_array(directory, _SCORES_FILE, np.array(self._scores, dtype=np.float64))
        save_array(directory, _RETRIEVED_FILE, np.array(self._retrieved, dtype=np.int8))
        return state

    @classmethod
    def _from_saved(
        cls, path: Path, state: dict[str, Any], params: dict[str, Any], backends: dict[str, Any]
    ) -> BudgetedGate:
        return cls(Gate.load_member(path, state.get("gate"), "wrapped gate", backends), **params)

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        credit, drift, has_reference = state.get("credit"), state.get("drift"), state.get("reference")
        if not isinstance(credit, float) or not 0 <= credit < 1 or not isinstance(drift, bool):
            raise GateLoadError(f"{directory}: field 'state.credit' or 'state.drift' is malformed")
        if not isinstance(has_reference, bool):
            raise GateLoadError(f"{directory}: field 'state.reference' is malformed")
        scores = load_array(directory, _SCORES_FILE).astype(np.float64)
        retrieved = load_array(directory, _RETRIEVED_FILE)
        if scores.ndim != 1 or len(scores) > self.window or not np.all(np.isfinite(scores)):
            raise GateLoadError(f"{directory}: file {_SCORES_FILE!r} is not a window of at most {self.window} scores")
        if retrieved.shape != scores.shape or not np.isin(retrieved, (0, 1)).all():
            raise GateLoadError(f"{directory}: file {_RETRIEVED_FILE!r} does not match the window's scores")
        if has_reference:
            reference = load_array(directory, _REFERENCE_FILE).astype(np.float64)
            if reference.ndim != 1 or not reference.size or not np.all(np.diff(reference) >= 0):
                raise GateLoadError(f"{directory}: file {_REFERENCE_FILE!r} is not sorted calibration scores")
            self._reference = reference
        self._scores.extend(scores.tolist())
        self._retrieved.extend(bool(r) for r in retrieved)
        self._credit, self._drift = credit, drift


def _quantile(pool: np.ndarray, rate: float) -> tuple[float, float]:
    """The smallest pool score q with at most rate·n scores above it, and the share of
    the scores equal to q that retrieving brings the pool to rate·n."""
    ordered = np.sort(pool)
    allowed = rate * len(ordered)
    above = len(ordered) - np.searchsorted(ordered, ordered, "right")
    j = int(np.argmax(above <= allowed + 1e-9))
    q = float(ordered[j])
    ties = int(np.count_nonzero(ordered == q))
    return q, float(np.clip((allowed - above[j]) / ties, 0.0, 1.0))
