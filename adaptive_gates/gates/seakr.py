"""SeaKR's self-aware retrieval gate (Yao et al., 2024; SPEC §4.2), simple-QA form.

Sample answers to the question from the LLM alone and measure how much its internal
states disagree across them (the self-aware uncertainty U of
``adaptive_gates.uncertainty``); retrieve when U is above a threshold δ. The need
score is U itself. In multi-hop SeaKR the same test runs on every reasoning step
(``adaptive_gates.seakr_pipeline``); here the context is the plain answer prompt.

The threshold. The paper retrieves when U > −6 for LLaMA-2-7B, just above its floor
of about −6.2 (identical samples). That floor, and so δ, moves with the model, the
layer read, k and α, so no default would transfer: the gate has no threshold until
it is calibrated (``calibrate(questions, target_rate=...)`` needs no labels) or one
is passed as ``threshold=``. Deciding before either raises ``NotFittedError`` at once.

Undefined U (every sample empty): the decision is the gate's fallback, which
retrieves by default as SeaKR does, with the reason as ``error`` and the evidence in
``details``. ``score``/``calibrate`` refuse such a question (``BackendError``).

Cost: k samples per question. With SmolLM2-135M on one CPU thread, U (k=20) took 2.5x
one greedy answer at 24 new tokens and 5.8x at SPEC's 100, the longest sample setting
the pace (``benchmarks/README.md``); pass the greedy call's own budget as
``uncertainty={"max_new_tokens": ...}`` for short answers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..answering import build_prompt
from ..errors import GateLoadError, NotFittedError
from ..models.local_lm import _check_stops
from ..prompts import fill
from ..uncertainty import SelfAwareUncertainty
from .base import FALLBACK_REASON, Gate

if TYPE_CHECKING:
    from ..models.local_lm import LocalCausalLM

logger = logging.getLogger(__name__)

#: The project's plain-QA answer prompt (``answering.build_prompt``) with a slot.
DEFAULT_PROMPT_TEMPLATE = build_prompt("{question}")
#: The answerer's stop string: U is measured on answers cut like the greedy one.
DEFAULT_STOP = ("\n",)
#: Sample texts shown in a decision's details.
_SHOWN_SAMPLES = 3


class SeaKRGate(Gate):
    """Retrieve when the LLM's self-aware uncertainty U about its answer exceeds δ.

    Args:
        lm: the model answering the questions; ``None`` = the embedded default.
        uncertainty: an estimator, or its settings as a dict (see
            ``SelfAwareUncertainty``; e.g. ``SelfAwareUncertainty.inside(lm)``);
            ``None`` = SeaKR's settings on ``lm``. Give ``lm`` or an estimator, not both.
        prompt_template: the answer prompt, with a ``{question}`` slot; use the prompt
            of the greedy call whose uncertainty matters.
        stop: stop strings of the samples (those of that greedy call).
        threshold: δ, when known for this model and settings; calibration replaces it.
        fallback_retrieve: the decision taken when U is undefined or scoring fails.
    """

    name = "seakr"

    def __init__(
        self,
        lm: LocalCausalLM | None = None,
        *,
        uncertainty: SelfAwareUncertainty | Mapping[str, Any] | None = None,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        stop: Sequence[str] | None = DEFAULT_STOP,
        threshold: float | None = None,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        if isinstance(uncertainty, SelfAwareUncertainty):
            if lm is not None:
                raise ValueError("give lm= or an uncertainty estimator (which has its own lm), not both")
            self.uncertainty = uncertainty
        elif uncertainty is None or isinstance(uncertainty, Mapping):
            self.uncertainty = SelfAwareUncertainty(lm, **dict(uncertainty or {}))
        else:
            raise ValueError(f"uncertainty must be a SelfAwareUncertainty, a dict or None, got {type(uncertainty).__name__}")
        self.prompt_template = check_template(prompt_template, "question")
        self.stop = _check_stops(stop)
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold)
        ):
            raise ValueError(f"threshold must be a finite number or None, got {threshold!r}")
        self.threshold = None if threshold is None else float(threshold)

    def _json_params(self) -> dict[str, Any]:
        return {
            "uncertainty": self.uncertainty.get_params(),
            "prompt_template": self.prompt_template,
            "stop": self.stop,
            "threshold": self.threshold,
            "fallback_retrieve": self.fallback_retrieve,
        }

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
        return self.threshold

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        scores, details = [], []
        for question in questions:
            estimate = self.uncertainty.estimate(fill(self.prompt_template, question=question), stop=self.stop)
            logger.debug("seakr: U=%.4f from %d samples for %r", estimate.value, estimate.n_samples, question)
            evidence = estimate.to_dict()
            evidence["uncertainty"] = evidence.pop("value")
            evidence["samples"] = evidence["samples"][:_SHOWN_SAMPLES]
            if not estimate.defined:
                evidence[FALLBACK_REASON] = f"U undefined: all {self.uncertainty.k} sampled answers were empty"
            scores.append(estimate.value)
            details.append(evidence)
        return np.array(scores, dtype=np.float64), details

    def _save_state(self, directory: Path) -> dict[str, Any]:
        return {"model_id": self.uncertainty.lm.model_id}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        saved, current = state.get("model_id"), self.uncertainty.lm.model_id
        if saved != current:
            raise GateLoadError(
                f"{directory}: field 'state.model_id' is {saved!r} but the given model is {current!r}; "
                "U (and so the threshold) belongs to the model it was calibrated with"
            )


def check_template(template: object, slot: str) -> str:
    """``template`` if it is a string with a ``{slot}`` for ``prompts.fill``."""
    if not isinstance(template, str):
        raise ValueError(f"prompt template must be a str, got {type(template).__name__}")
    if "{" + slot + "}" not in template:
        raise ValueError(f"prompt template must contain {{{slot}}}, got {template!r}")
    return template
