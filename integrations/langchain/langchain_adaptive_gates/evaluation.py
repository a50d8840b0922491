"""LangChain's string evaluators as the judges that teach a gate.

``EvaluatorFeedback`` runs an evaluator (``langchain_classic.evaluation``'s
``load_evaluator("qa" | "exact_match" | "labeled_criteria" | ...)``, any object with
``evaluate_strings``/``aevaluate_strings``) on an answer a gate's decision chose, and
teaches the gate its verdict (``Gate.record_judged_feedback``). An answer made with
retrieval says nothing of whether retrieval was needed; the answer the LLM gives
without it does: the one the gate already made (``answer_without_retrieval`` of an
answer-first gate's decision), or, with ``draft_llm``, one asked for. Judged right, it
teaches that retrieval was not needed for that question; judged wrong, that it was.

A grade of 1 is right and 0 wrong (``score_verdict``); an evaluator that scores a
distance instead (``embedding_distance``, ``string_distance``: 0 is an exact match) is
read with ``max_distance=`` (``distance_verdict``: right when at most that far), and
refused without it.

The decision comes from wherever the run left it: a router's output
(``output["gate_decision"]``), a ``GateFeedback`` handler (``feedback.decision(run_id)``),
a gated tool's artifact; as a ``GateDecision`` or its dict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import Feedback

#: What a verdict is read from: an evaluator's result dict.
Verdict = Callable[[Mapping[str, Any]], bool | None]


#: LangChain's evaluators that score a distance (0: the same; larger: further apart),
#: by class name (langchain-classic's embedding and string distance evaluators).
DISTANCE_EVALUATORS = ("EmbeddingDistanceEvalChain", "StringDistanceEvalChain")


def is_distance_evaluator(evaluator: Any) -> bool:
    """Whether ``evaluator`` scores a distance rather than a grade: one of LangChain's
    distance evaluators (``load_evaluator("embedding_distance")``, ``"string_distance"``)
    or any whose ``evaluation_name`` ends in ``_distance``."""
    if any(cls.__name__ in DISTANCE_EVALUATORS for cls in type(evaluator).__mro__):
        return True
    try:
        name = getattr(evaluator, "evaluation_name", None)
    except Exception:  # a property that cannot answer names no distance
        return False
    return isinstance(name, str) and name.endswith("_distance")


def distance_verdict(max_distance: float) -> Verdict:
    """The verdict of a distance evaluator: right when its score (the distance between the
    answer and the reference) is at most ``max_distance``; ``None`` when it gave none."""
    if isinstance(max_distance, bool) or not isinstance(max_distance, (int, float)) or not math.isfinite(max_distance):
        raise ValueError(f"max_distance must be a finite number, got {max_distance!r}")
    if max_distance < 0:
        raise ValueError(f"max_distance must be at least 0 (a distance is), got {max_distance!r}")

    def verdict(result: Mapping[str, Any]) -> bool | None:
        score = result.get("score")
        if score is None:
            return None
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise ValueError(f"the evaluator scored {score!r}, not a distance")
        return float(score) <= max_distance

    return verdict


def score_verdict(result: Mapping[str, Any]) -> bool | None:
    """The verdict of an evaluator that scores 1 (right) or 0 (wrong), as ``qa``,
    ``exact_match`` and the criteria evaluators do; ``None`` when it gave no score."""
    score = result.get("score")
    if score is None:
        return None
    if isinstance(score, bool) or score in (0, 1):
        return bool(score)
    raise ValueError(f"the evaluator scored {score!r}, not 0 or 1: pass verdict= to read its result")


@dataclass(frozen=True)
class JudgedAnswer:
    """What ``EvaluatorFeedback`` judged and taught: the evaluator's result on the answer,
    its result on the answer without retrieval (``None``: not judged), and the
    observations the gate logged (the answer's first)."""

    answer: Mapping[str, Any]
    draft: Mapping[str, Any] | None
    taught: list[Feedback]


class EvaluatorFeedback:
    """Teaches ``gate`` from ``evaluator``'s verdicts on the answers its decisions chose.

    Args:
        gate: the gate that decided (it must learn online: an SKR gate, or a budget,
            cascade or stacked gate over one).
        evaluator: a LangChain string evaluator (``evaluate_strings(prediction=,
            input=, reference=)`` and its async ``aevaluate_strings``).
        draft_llm: when an answer was made with retrieval and its decision holds no
            answer without retrieval, this model is asked the question alone (one more
            call) so that answer is judged too; ``None``: only a stored one is judged.
        verdict: reads right (``True``) or wrong from the evaluator's result (default
            ``score_verdict``: a score of 1 or 0).
        max_distance: for an evaluator that scores a distance (LangChain's
            ``embedding_distance`` and ``string_distance``: 0 for an answer equal to the
            reference, larger the further it is), the largest distance judged right
            (``distance_verdict``). A distance evaluator without it is refused, since
            its 0 would read as a wrong grade and teach the opposite.
    """

    def __init__(
        self,
        gate: Gate,
        evaluator: Any,
        *,
        draft_llm: BaseLanguageModel | None = None,
        verdict: Verdict | None = None,
        max_distance: float | None = None,
    ) -> None:
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        if not callable(getattr(evaluator, "aevaluate_strings", None)):
            raise TypeError(f"evaluator must be a LangChain string evaluator, got {type(evaluator).__name__}")
        if verdict is not None and max_distance is not None:
            raise ValueError("give verdict= or max_distance=, not both")
        if max_distance is not None:
            verdict = distance_verdict(max_distance)
        elif verdict is None:
            if is_distance_evaluator(evaluator):
                raise ValueError(
                    f"{type(evaluator).__name__} scores a distance (0 for an answer equal to the reference, "
                    "larger the further it is), not a grade of 1 or 0: pass max_distance=, the largest distance "
                    "judged right (or verdict= to read its result yourself)"
                )
            verdict = score_verdict
        self.gate = gate
        self.evaluator = evaluator
        self.draft_llm = draft_llm
        self.verdict = verdict

    def teach(
        self, decision: GateDecision | Mapping[str, Any], answer: str | BaseMessage, *, reference: str | None = None
    ) -> JudgedAnswer:
        """Judge ``answer`` (what ``decision`` chose to serve) and teach the gate;
        ``reference`` goes to an evaluator that compares with one."""
        decision = _decision(decision)
        result = self.evaluator.evaluate_strings(**self._strings(decision, answer, reference))
        draft = None
        if decision.retrieve and (text := self._draft(decision)) is not None:
            draft = self.evaluator.evaluate_strings(**self._strings(decision, text, reference))
        return self._taught(decision, result, draft)

    async def ateach(
        self, decision: GateDecision | Mapping[str, Any], answer: str | BaseMessage, *, reference: str | None = None
    ) -> JudgedAnswer:
        """``teach`` on the async path."""
        decision = _decision(decision)
        result = await self.evaluator.aevaluate_strings(**self._strings(decision, answer, reference))
        draft = None
        if decision.retrieve and (text := await self._adraft(decision)) is not None:
            draft = await self.evaluator.aevaluate_strings(**self._strings(decision, text, reference))
        return self._taught(decision, result, draft)

    def _taught(
        self, decision: GateDecision, result: Mapping[str, Any], draft: Mapping[str, Any] | None
    ) -> JudgedAnswer:
        correct = self.verdict(result)
        if correct is None:
            raise ValueError(f"the evaluator gave no verdict on the answer ({dict(result)!r}); nothing is taught")
        draft_correct = None if draft is None else self.verdict(draft)
        return JudgedAnswer(result, draft, self.gate.record_judged_feedback(decision, correct, draft_correct))

    def _strings(self, decision: GateDecision, answer: str | BaseMessage, reference: str | None) -> dict[str, Any]:
        text = answer.text if isinstance(answer, BaseMessage) else answer
        strings: dict[str, Any] = {"prediction": text}
        if getattr(self.evaluator, "requires_input", True):  # one that reads no question warns when given one
            strings["input"] = decision.question
        if reference is not None:
            strings["reference"] = reference
        return strings

    def _draft(self, decision: GateDecision) -> str | None:
        if decision.answer_without_retrieval is not None or self.draft_llm is None:
            return decision.answer_without_retrieval
        return _text(self.draft_llm.invoke(_question(decision)))

    async def _adraft(self, decision: GateDecision) -> str | None:
        if decision.answer_without_retrieval is not None or self.draft_llm is None:
            return decision.answer_without_retrieval
        return _text(await self.draft_llm.ainvoke(_question(decision)))


def _decision(decision: GateDecision | Mapping[str, Any]) -> GateDecision:
    found = decision if isinstance(decision, GateDecision) else GateDecision.from_dict(dict(decision))
    _question(found)
    return found


def _question(decision: GateDecision) -> str:
    if decision.question is None:
        raise ValueError("the decision does not carry the question it judged, so it cannot teach the gate")
    return decision.question


def _text(reply: Any) -> str:
    return reply.text if isinstance(reply, BaseMessage) else str(reply)
