"""LlamaIndex's evaluators as the judges that teach a gate.

``EvaluatorFeedback`` runs an evaluator (``CorrectnessEvaluator``, ``RelevancyEvaluator``,
``SemanticSimilarityEvaluator``, ... any ``BaseEvaluator``) on a response of a gated
engine and teaches the gate its verdict (``Gate.record_judged_feedback``). An answer
made with retrieval says nothing of whether retrieval was needed; the answer the LLM
gives without it does: the one the gate already made (``answer_without_retrieval`` of an
answer-first gate's decision), or, with ``draft_llm``, one asked for. Judged right, it
teaches that retrieval was not needed for that question; judged wrong, that it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llama_index.core.async_utils import asyncio_run
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult
from llama_index.core.llms import LLM
from llama_index.selectors.adaptive_gates.gating import decision_of

from adaptive_gates import Feedback, Gate, GateDecision


@dataclass(frozen=True)
class JudgedResponse:
    """What ``EvaluatorFeedback`` judged and taught: the evaluator's result on the answer,
    its result on the answer without retrieval (``None``: not judged), and the
    observations the gate logged (the answer's first)."""

    answer: EvaluationResult
    draft: EvaluationResult | None
    taught: list[Feedback]


class EvaluatorFeedback:
    """Teaches ``gate`` from ``evaluator``'s verdicts on a gated engine's responses.

    Args:
        gate: the gate that decided the responses (it must learn online: an SKR gate, or
            a budget, cascade or stacked gate over one).
        evaluator: any LlamaIndex evaluator; its ``passing`` is the verdict.
        draft_llm: when a response was made with retrieval and its decision holds no
            answer without retrieval, this LLM is asked the question alone (one more
            call) so that answer is judged too; ``None``: only a stored one is judged.
    """

    def __init__(self, gate: Gate, evaluator: BaseEvaluator, *, draft_llm: LLM | None = None) -> None:
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        if not isinstance(evaluator, BaseEvaluator):
            raise TypeError(f"evaluator must be a LlamaIndex BaseEvaluator, got {type(evaluator).__name__}")
        self.gate = gate
        self.evaluator = evaluator
        self.draft_llm = draft_llm

    def teach(self, query: str, response: Any, **evaluate_kwargs: Any) -> JudgedResponse:
        """``ateach`` from synchronous code."""
        return asyncio_run(self.ateach(query, response, **evaluate_kwargs))

    async def ateach(self, query: str, response: Any, **evaluate_kwargs: Any) -> JudgedResponse:
        """Judge ``response`` (a gated engine's, carrying its decision) to ``query`` and
        teach the gate; ``evaluate_kwargs`` go to the evaluator (e.g. ``reference=``).

        Raises:
            ValueError: the response carries no decision, or the evaluator gave no
                verdict on the answer (``passing`` is ``None``): nothing is taught.
        """
        decision = decision_of(response)
        if decision is None:
            raise ValueError("the response carries no gate decision: pass a gated engine's response")
        answer = await self.evaluator.aevaluate_response(query=query, response=response, **evaluate_kwargs)
        if answer.passing is None:
            raise ValueError(f"the evaluator gave no verdict on the answer ({answer.feedback!r}); nothing is taught")
        draft = await self._judge_draft(query, decision, **evaluate_kwargs) if decision.retrieve else None
        draft_correct = None if draft is None else draft.passing
        return JudgedResponse(answer, draft, self.gate.record_judged_feedback(decision, answer.passing, draft_correct))

    async def _judge_draft(self, query: str, decision: GateDecision, **evaluate_kwargs: Any) -> EvaluationResult | None:
        """The evaluator's result on the answer without retrieval (``None``: none to judge)."""
        text = decision.answer_without_retrieval
        if text is None and self.draft_llm is not None:
            text = (await self.draft_llm.acomplete(query)).text
        if text is None:
            return None
        return await self.evaluator.aevaluate(query=query, response=text, **evaluate_kwargs)
