"""SeaKR's test of one context (SPEC §4.2): pseudo-generate the next step greedily and,
unless it is empty, estimate the model's uncertainty U of the context. The gate
(``seakr.gate``) and the pipeline's loop both take their decisions from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..records.validation import check_stops
from .uncertainty import SelfAwareUncertainty, UncertaintyEstimate

if TYPE_CHECKING:
    from ..models.lm.generation import Generation
    from ..models.protocols import ProbingLM


@dataclass(frozen=True)
class PseudoStep:
    """SPEC §4.2's test of one context: the greedy next step, and U of the context.

    Attributes:
        generation: the greedy pseudo-generation (its tokens and log-probabilities feed
            FLARE-style queries).
        estimate: U of the context; ``None`` when the step is empty (U is not needed).
    """

    generation: Generation
    estimate: UncertaintyEstimate | None

    @property
    def text(self) -> str:
        """The greedy step, stripped."""
        return self.generation.text.strip()

    @property
    def forced_reason(self) -> str | None:
        """Why SeaKR retrieves whatever δ is (empty step, undefined U), else ``None``."""
        if self.estimate is None:
            return "empty greedy step: the model has nothing to go on, so SeaKR retrieves"
        if not self.estimate.defined:
            return "U undefined: every sampled continuation was empty, so SeaKR retrieves"
        return None

    def retrieves(self, threshold: float) -> bool:
        """SPEC §4.2: retrieve iff U > ``threshold`` or the step is empty (or U undefined)."""
        # no forced reason: the step has an estimate
        return self.forced_reason is not None or (self.estimate is not None and self.estimate.value > threshold)


def pseudo_step(
    lm: ProbingLM,
    uncertainty: SelfAwareUncertainty,
    prompt: str,
    *,
    stop: Sequence[str] | None,
    max_new_tokens: int,
    formatted: bool = False,
) -> PseudoStep:
    """Pseudo-generate the next step of ``prompt`` greedily with ``lm`` and, unless it is
    empty, estimate U of ``prompt`` (samples cut by the same ``stop`` strings, and at the
    step's length when the estimator's ``cap_to_greedy`` is on).

    ``formatted``: ``prompt`` is the full model input, not a chat user message.
    """
    stops = check_stops(stop)
    generation = lm.generate(prompt, max_new_tokens=max_new_tokens, stop=stops, formatted=formatted)[0]
    if not generation.text.strip():
        return PseudoStep(generation, None)
    estimate = uncertainty.estimate(prompt, stop=stops, formatted=formatted, greedy_tokens=len(generation.token_ids))
    return PseudoStep(generation, estimate)
