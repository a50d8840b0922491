"""SeaKR's self-aware retrieval gate (Yao et al., 2024; SPEC §4.2), simple-QA form.

SPEC §4.2 for a context c: pseudo-generate the next step greedily; retrieve iff U(c) > δ
or that text is empty. U(c) is the self-aware uncertainty of ``adaptive_gates.seakr.uncertainty``
measured on the context itself: k sampled continuations of c (cut by the greedy call's
stop strings), and how much the model's internal states disagree across them. The
greedy step only says whether the model has anything to go on; when it is empty U is
not computed. ``pseudo_step`` is that test, shared with the multi-hop pipeline
(``adaptive_gates.seakr.pipeline``), which runs it on every reasoning step; here the
context is the plain answer prompt, and the need score is U itself.

The threshold. The paper retrieves when U > −6 for LLaMA-2-7B, just above its floor
of about −6.2 (identical samples). That floor, and so δ, moves with the model, the
layer read, k and α, so no default would transfer: the gate has no threshold until
it is calibrated (``calibrate(questions, target_rate=...)`` needs no labels) or one
is passed as ``threshold=``. Deciding before either raises ``NotFittedError`` at once.

An empty greedy step or an undefined U (every sample empty): SeaKR retrieves. The
decision is the gate's fallback, which retrieves by default, with the reason as
``error`` and the evidence (the greedy step, the samples) in ``details``.
``score``/``calibrate`` refuse such a question (``BackendError``): it has no U.

Cost: one greedy step plus k samples per question. With SmolLM2-135M on one CPU
thread, U (k=20) took 2.5x one greedy answer at 24 new tokens and 6.8x at SPEC's 100,
the longest sample setting the pace (medians, ``benchmarks/results/seakr_cost.md``);
pass the greedy call's own budget as ``uncertainty={"max_new_tokens": ...}`` for short
answers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..answering.answerer import ANSWER_STOP, prompt_template
from ..answering.prompts import fill
from ..errors import NotFittedError
from ..gates.base.assessment import Assessment
from ..gates.base.constraints import Boolean, InstanceOf, Integer, Real, Text
from ..gates.base.gate import Gate
from ..models.protocols import check_probing_lm
from ..persistence.saved_format import check_saved_backend
from ..records.validation import check_stops
from .step import pseudo_step
from .uncertainty import SelfAwareUncertainty

if TYPE_CHECKING:
    from ..models.protocols import ProbingLM

logger = logging.getLogger(__name__)

#: The project's plain-QA answer prompt (``answering.build_prompt``) with a slot.
DEFAULT_PROMPT_TEMPLATE = prompt_template()
#: The answerer's stop string: U is measured on answers cut like the greedy one.
DEFAULT_STOP = ANSWER_STOP
#: The greedy step's budget: the answerer's (``LLMAnswerer.max_new_tokens``).
DEFAULT_STEP_TOKENS = 24
#: Sample texts shown in a decision's details.
_SHOWN_SAMPLES = 3


class SeaKRGate(Gate):
    """Retrieve when the greedy answer is empty or the LLM's self-aware uncertainty U
    about the question's context exceeds δ.

    Args:
        lm: the model answering the questions, a ``ProbingLM`` such as
            ``LocalCausalLM``; ``None`` = the embedded default.
        uncertainty: an estimator, or its settings as a dict (see
            ``SelfAwareUncertainty``; e.g. ``SelfAwareUncertainty.inside(lm)``);
            ``None`` = SeaKR's settings on ``lm``. Give ``lm`` or an estimator, not both.
        prompt_template: the answer prompt, with a ``{question}`` slot; use the prompt
            of the greedy call whose uncertainty matters.
        stop: stop strings of the greedy step and the samples (those of that greedy call).
        step_tokens: the greedy step's budget of new tokens.
        formatted: the template is the full model input (completion prompts); ``False``
            sends it as a chat user message.
        threshold: δ, when known for this model and settings; calibration replaces it.
        fallback_retrieve: the decision taken when the step is empty, U is undefined
            or scoring fails (SeaKR retrieves).
    """

    name = "seakr"
    backend_params = frozenset({"lm"})
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "uncertainty": [InstanceOf(SelfAwareUncertainty), InstanceOf(Mapping), None],
        "prompt_template": Text("question"),
        "step_tokens": Integer(1),
        "formatted": Boolean(),
        "threshold": [Real(), None],
    }

    def __init__(
        self,
        lm: ProbingLM | None = None,
        *,
        uncertainty: SelfAwareUncertainty | Mapping[str, Any] | None = None,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        stop: Sequence[str] | None = DEFAULT_STOP,
        step_tokens: int = DEFAULT_STEP_TOKENS,
        formatted: bool = False,
        threshold: float | None = None,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self.lm = lm
        self.uncertainty = uncertainty
        self.prompt_template = prompt_template
        self.stop = stop
        self.step_tokens = step_tokens
        self.formatted = formatted
        self.threshold = threshold
        self._estimator: SelfAwareUncertainty | None = None

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        lm, uncertainty = params["lm"], params["uncertainty"]
        if lm is not None:
            check_probing_lm(lm, "SeaKRGate")
        if isinstance(uncertainty, SelfAwareUncertainty) and lm is not None:
            raise ValueError("give lm= or an uncertainty estimator (which has its own lm), not both")
        _estimator_of(lm, uncertainty)  # refuses bad settings now, though the gate's estimator is built on first use
        check_stops(params["stop"])

    @property
    def estimator(self) -> SelfAwareUncertainty:
        """The estimator of U in use (``uncertainty`` itself, or built from its settings
        on first use)."""
        return self._built_once("_estimator", lambda: _estimator_of(self.lm, self.uncertainty))

    def _json_params(self) -> dict[str, Any]:
        # The estimator's settings, whichever form ``uncertainty`` was given in.
        return {**super()._json_params(), "uncertainty": self.estimator.get_params()}

    @property
    def is_fitted(self) -> bool:
        """Always true: U needs no training; only the threshold needs calibrating."""
        return True

    def _default_threshold(self) -> float:
        if self.threshold is None:
            raise NotFittedError(
                "SeaKRGate has no threshold: δ depends on the model, layer, k and alpha, so "
                "call calibrate(questions, target_rate=...) or pass threshold="
            )
        return float(self.threshold)

    def _score(self, questions: list[str]) -> Assessment:
        scores, details, fallbacks = [], [], []
        estimator = self.estimator
        for question in questions:
            step = pseudo_step(
                estimator.lm,
                estimator,
                fill(self.prompt_template, question=question),
                stop=self.stop,
                max_new_tokens=self.step_tokens,
                formatted=self.formatted,
            )
            evidence: dict[str, Any] = {"pseudo_step": step.text}
            if step.estimate is not None:
                estimate = step.estimate.to_dict()
                estimate["uncertainty"] = estimate.pop("value")
                estimate["samples"] = estimate["samples"][:_SHOWN_SAMPLES]
                evidence.update(estimate)
            reason = step.forced_reason
            if reason is None and step.estimate is not None:  # no forced reason: an estimate
                scores.append(step.estimate.value)
                logger.debug("seakr: U=%.4f for %r", scores[-1], question)
            else:
                scores.append(math.nan)
            details.append(evidence)
            fallbacks.append(reason)
        return Assessment(np.array(scores, dtype=np.float64), details, fallbacks=fallbacks)

    def _save_state(self, directory: Path) -> dict[str, Any]:
        return {"model_id": self.estimator.lm.model_id}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        check_saved_backend(
            directory,
            "state.model_id",
            state.get("model_id"),
            self.estimator.lm.model_id,
            "model",
            why="U (and so the threshold) belongs to the model it was calibrated with",
        )


def _estimator_of(
    lm: ProbingLM | None, uncertainty: SelfAwareUncertainty | Mapping[str, Any] | None
) -> SelfAwareUncertainty:
    """``uncertainty`` itself, or an estimator of its settings (SeaKR's by default) on ``lm``."""
    if isinstance(uncertainty, SelfAwareUncertainty):
        return uncertainty
    return SelfAwareUncertainty(lm, **dict(uncertainty or {}))
