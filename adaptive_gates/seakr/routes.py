"""SeaKR's final answer after the multi-hop loop (SPEC §4.4): the rationale and
knowledge routes, each written greedily on SeaKR's prompt, and the choice between them
by U; or, without selection, the answer the steps reached."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..records.answer_metrics import extract_seakr_answer
from .reasoning_prompt import ANSWER_STOPS, STEP_STOPS
from .trace import Route, SeaKRResult, Step

if TYPE_CHECKING:
    from ..models.lm.generation import Generation
    from ..retrieval.base import Hit
    from .reasoning import AnswerCandidate, ReasoningSelector

_FINAL_CUE = " So the final answer is"
_ANSWER_CUE = " So the answer is"


@dataclass(frozen=True)
class FinalAnswer:
    """Writes a question's final answer with the pipeline's prompt and decoding:
    ``prompt(question, steps, documents)`` is SeaKR's prompt, ``greedy(prompt, stop,
    max_new_tokens)`` its greedy continuation; ``rationale`` is how the rationale route
    answers (``RATIONALE_FORMS``)."""

    prompt: Callable[[str, Sequence[str], Sequence[str]], str]
    greedy: Callable[[str, Sequence[str], int], Generation]
    rationale: str
    step_tokens: int
    answer_tokens: int

    def finish(self, result: SeaKRResult, read: list[Hit], selector: ReasoningSelector | None) -> None:
        """Set the answer of ``result``: the route ``selector`` picks, or the loop's own
        when there is no selector (or no route answered)."""
        from .reasoning import is_usable

        question = result.question
        steps = [s.text for s in result.steps if s.text]
        if selector is None:
            result.answer = self.unselected(question, steps, result.loop_answer)
            return
        candidates = [self._rationale_route(question, steps, result)]
        if read:
            candidates.append(self._read_route("knowledge", question, [h.as_passage() for h in read], result))
        if not any(is_usable(c.answer) for c in candidates):
            # Our fallback: no route answered, so there is nothing for U to choose between;
            # answer as without selection rather than not at all.
            result.answer = self.unselected(question, steps, result.loop_answer)
            return
        selection = selector.select(candidates)
        for route, u in zip(result.routes, selection.uncertainties):
            route.uncertainty = u
        result.chosen_route, result.selection_reason = selection.name, selection.reason
        result.answer = selection.answer or ""

    def unselected(
        self, question: str, steps: Sequence[str], loop_answer: str | None, documents: Sequence[str] = ()
    ) -> str:
        """The answer the steps reached, else the one the model gives when "So the answer
        is" follows them (after ``documents``, the passages in context)."""
        return loop_answer or self._forced_answer(question, steps, _ANSWER_CUE, documents)

    def _read_route(self, name: str, question: str, documents: list[str], result: SeaKRResult) -> AnswerCandidate:
        """A route that answers with a full chain of thought from ``documents`` as context;
        its U (that context's) is left to the selector, which needs it only for a choice."""
        from .reasoning import AnswerCandidate

        prompt = self.prompt(question, (), documents)
        text = self.greedy(prompt, ANSWER_STOPS, self.answer_tokens).text.strip()
        answer = extract_seakr_answer(text)
        result.routes.append(Route(name, answer, text))
        return AnswerCandidate(answer, prompt, name=name)

    def _rationale_route(self, question: str, steps: list[str], result: SeaKRResult) -> AnswerCandidate:
        """The rationale route: re-read the steps as context (code form), or append
        "So the final answer is" to them and score the mean U of the steps (paper form)."""
        from .reasoning import AnswerCandidate

        if self.rationale == "reread":
            if steps:
                return self._read_route("rationale", question, [" ".join(steps)], result)
            result.routes.append(Route("rationale", None, ""))
            return AnswerCandidate(None, name="rationale")
        answer = self._forced_answer(question, steps, _FINAL_CUE) or None
        defined = [u for u in map(_step_uncertainty, result.steps) if u is not None and not math.isnan(u)]
        mean = sum(defined) / len(defined) if defined else math.nan
        result.routes.append(Route("rationale", answer, answer or "", uncertainty=mean))
        return AnswerCandidate(answer, uncertainty=mean, name="rationale")

    def _forced_answer(self, question: str, steps: Sequence[str], cue: str, documents: Sequence[str] = ()) -> str:
        """The answer the model gives when ``cue`` follows the steps (lower-cased, like
        ``extract_seakr_answer``)."""
        generated = self.greedy(self.prompt(question, steps, documents) + cue, STEP_STOPS, self.step_tokens)
        return generated.text.strip().rstrip(".").strip().lower()


def _step_uncertainty(step: Step) -> float | None:
    """U of the context a kept step came from: the chosen snippet's, else the gate's."""
    if not step.text:
        return None
    return step.chosen_uncertainty if step.chosen is not None else step.uncertainty
