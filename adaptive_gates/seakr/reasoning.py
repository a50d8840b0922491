"""SeaKR's self-aware reasoning (SPEC §4.4): pick the final answer the LLM is surer of.

SeaKR ends with two candidate answers: one from its own rationales (the reasoning steps
re-read as context) and one from all the knowledge it selected, with a full chain of
thought. It keeps the one whose context gives the lower self-aware uncertainty U; a
missing or "unknown" answer loses to the other whatever the U's. The selector takes
any number of candidates, each with the prompt that produced it (U is then computed)
or with U already known (e.g. the paper's mean per-step U of the rationale route).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..records.answer_metrics import normalize_answer
from ..records.validation import check_stops
from .uncertainty import SelfAwareUncertainty

#: Normalised answers that count as no answer (SeaKR's "unknown").
UNKNOWN_ANSWERS = frozenset({"", "unknown"})


@dataclass(frozen=True)
class AnswerCandidate:
    """One route's final answer.

    Attributes:
        answer: the extracted answer; ``None`` when the route produced none.
        prompt: the context that produced it, to compute U from (needed unless
            ``uncertainty`` is given).
        uncertainty: U if already computed (NaN = undefined, ranks last).
        name: a label for the record, e.g. ``"rationale"`` or ``"knowledge"``.
    """

    answer: str | None
    prompt: str | None = None
    uncertainty: float | None = None
    name: str = ""


@dataclass(frozen=True)
class Selection:
    """The chosen answer and why.

    Attributes:
        answer: the chosen candidate's answer.
        index: its position among the candidates.
        name: its label.
        uncertainties: U of each candidate (``None`` where it was not needed).
        reason: ``"lower uncertainty"``, ``"only usable answer"`` or ``"no usable answer"``.
    """

    answer: str | None
    index: int
    name: str
    uncertainties: tuple[float | None, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN becomes ``None``)."""
        out = asdict(self)
        out["uncertainties"] = [u if u is not None and math.isfinite(u) else None for u in self.uncertainties]
        return out


class ReasoningSelector:
    """Choose among candidate final answers by lower U, with SeaKR's fallbacks.

    Args:
        uncertainty: the U estimator for candidates given by prompt; ``None`` = SeaKR's
            settings on the embedded LM (built on first need).
        stop: stop strings of the samples (those of the final-answer call).
        formatted: ``True`` when prompts are the full model input, ``False`` for chat
            user messages.
    """

    def __init__(
        self,
        uncertainty: SelfAwareUncertainty | None = None,
        *,
        stop: Sequence[str] | None = ("\n",),
        formatted: bool = False,
    ) -> None:
        if uncertainty is not None and not isinstance(uncertainty, SelfAwareUncertainty):
            raise ValueError(f"uncertainty must be a SelfAwareUncertainty or None, got {type(uncertainty).__name__}")
        self._uncertainty = uncertainty
        self.stop = check_stops(stop)
        self.formatted = formatted

    @property
    def uncertainty(self) -> SelfAwareUncertainty:
        """The U estimator (SeaKR's settings on the embedded LM unless one was given)."""
        if self._uncertainty is None:
            self._uncertainty = SelfAwareUncertainty()
        return self._uncertainty

    def select(self, candidates: Sequence[AnswerCandidate]) -> Selection:
        """The candidate to answer with. Usable candidates (an answer other than empty or
        "unknown") compete by U, lowest first; a single usable one wins without computing
        any U; with none usable all compete. Ties go to the earlier candidate."""
        candidates = list(candidates)
        if not candidates or not all(isinstance(c, AnswerCandidate) for c in candidates):
            raise ValueError("select() needs a non-empty sequence of AnswerCandidate")
        usable = [i for i, c in enumerate(candidates) if is_usable(c.answer)]
        uncertainties: list[float | None] = [c.uncertainty for c in candidates]
        if len(usable) == 1:
            chosen, reason = usable[0], "only usable answer"
        else:
            pool = usable or list(range(len(candidates)))
            for i in pool:
                if uncertainties[i] is None:
                    uncertainties[i] = self._u(candidates[i], i)
            chosen = min(pool, key=lambda i: _rank_key(uncertainties[i]))
            reason = "lower uncertainty" if usable else "no usable answer"
        c = candidates[chosen]
        return Selection(c.answer, chosen, c.name, tuple(uncertainties), reason)

    def _u(self, candidate: AnswerCandidate, index: int) -> float:
        if not isinstance(candidate.prompt, str) or not candidate.prompt.strip():
            raise ValueError(f"candidate {index} needs a prompt or an uncertainty to be compared")
        return self.uncertainty.estimate(candidate.prompt, stop=self.stop, formatted=self.formatted).value


def is_usable(answer: str | None) -> bool:
    """False for a missing, empty or "unknown" answer (after answer normalisation)."""
    return answer is not None and normalize_answer(answer) not in UNKNOWN_ANSWERS


def _rank_key(u: float | None) -> float:
    """Undefined U (NaN) ranks last, like SeaKR's +inf for an empty output."""
    return math.inf if u is None or math.isnan(u) else u
