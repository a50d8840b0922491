"""LlamaIndex's evaluators as the judges that teach a gate.

``EvaluatorFeedback`` runs an evaluator (``CorrectnessEvaluator``, ``RelevancyEvaluator``,
``SemanticSimilarityEvaluator``, ... any ``BaseEvaluator``) on a response of a gated
engine and teaches the gate its verdict (``Gate.record_judged_feedback``). An answer
made with retrieval says nothing of whether retrieval was needed; the answer the LLM
gives without it does: the one the gate already made (``answer_without_retrieval`` of an
answer-first gate's decision), or, with ``draft_llm``, one asked for. Judged right, it
teaches that retrieval was not needed for that question; judged wrong, that it was.

``BatchEvalRunner``'s results teach it too, in one call (``teach_batch`` /
``ateach_batch``): the runner keeps no response, so the decisions behind its answers are
recorded while it runs (``EvaluatorFeedback.recording()``, every ``GateDecisionEvent``
fired in the block).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from llama_index.core.async_utils import asyncio_run
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.llms import LLM
from llama_index.selectors.adaptive_gates.events import GateDecisionEvent
from llama_index.selectors.adaptive_gates.gating import decision_of
from pydantic import PrivateAttr

from adaptive_gates import Feedback, FeedbackNotSupportedError, Gate, GateDecision

_T = TypeVar("_T")


@dataclass(frozen=True)
class JudgedResponse:
    """What ``EvaluatorFeedback`` judged and taught: the evaluator's result on the answer,
    its result on the answer without retrieval (``None``: not judged), and the
    observations the gate logged (the answer's first)."""

    answer: EvaluationResult
    draft: EvaluationResult | None
    taught: list[Feedback]


@dataclass(frozen=True)
class JudgedQuery:
    """What ``EvaluatorFeedback.teach_batch`` taught for one query of a batch run: the
    query, the decision behind its answer, each evaluator's result on the answer (by the
    runner's evaluator names), the verdict taught (every evaluator passed it), the
    evaluator's result on the answer without retrieval (``None``: not judged), and the
    observations the gate logged (the answer's first)."""

    query: str
    decision: GateDecision
    answers: dict[str, EvaluationResult]
    correct: bool
    draft: EvaluationResult | None
    taught: list[Feedback]


class _Recorder(BaseEventHandler):
    """Hands each ``GateDecisionEvent`` to the recording it serves."""

    _sink: DecisionRecording | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "AdaptiveGatesDecisionRecorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, GateDecisionEvent) and self._sink is not None:
            self._sink.record(event.query, GateDecision.from_dict(event.decision))


class DecisionRecording(Mapping[str, list[GateDecision]]):
    """The gate decisions fired while a ``recording()`` block runs: each question a
    gate judged (stripped) to its decisions, in the order they were fired. While the
    block runs an event handler on the root dispatcher records every
    ``GateDecisionEvent``, from any thread or task."""

    def __init__(self) -> None:
        self._decisions: defaultdict[str, list[GateDecision]] = defaultdict(list)
        self._lock = threading.Lock()
        self._handler = _Recorder()
        self._handler._sink = self

    def record(self, question: str, decision: GateDecision) -> None:
        """Keep ``decision``, taken on ``question``."""
        with self._lock:
            self._decisions[question.strip()].append(decision)

    def __getitem__(self, question: str) -> list[GateDecision]:
        with self._lock:
            if question.strip() not in self._decisions:
                raise KeyError(question)
            return list(self._decisions[question.strip()])

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._decisions))

    def __len__(self) -> int:
        with self._lock:
            return len(self._decisions)

    def __repr__(self) -> str:
        return f"DecisionRecording({len(self)} questions)"

    def __enter__(self) -> DecisionRecording:
        get_dispatcher().add_event_handler(self._handler)
        return self

    def __exit__(self, *exc_info: object) -> None:
        handlers = get_dispatcher().event_handlers
        if any(handler is self._handler for handler in handlers):
            handlers.remove(self._handler)


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

    # ----------------------------------------------------------------- one response
    def teach(self, query: str, response: Any, **evaluate_kwargs: Any) -> JudgedResponse:
        """``ateach`` from synchronous code; what it raises is raised as it is."""
        return _run(self.ateach(query, response, **evaluate_kwargs))

    async def ateach(self, query: str, response: Any, **evaluate_kwargs: Any) -> JudgedResponse:
        """Judge ``response`` (a gated engine's, carrying its decision) to ``query`` and
        teach the gate; ``evaluate_kwargs`` go to the evaluator (e.g. ``reference=``).

        Raises:
            ValueError: the response carries no decision, or the evaluator gave no
                verdict on the answer (``passing`` is ``None``): nothing is taught.
            FeedbackNotSupportedError: the gate does not learn from feedback; nothing
                is judged.
        """
        decision = decision_of(response)
        if decision is None:
            raise ValueError("the response carries no gate decision: pass a gated engine's response")
        self._check_learns()
        answer = await self.evaluator.aevaluate_response(query=query, response=response, **evaluate_kwargs)
        if answer.passing is None:
            raise ValueError(f"the evaluator gave no verdict on the answer ({answer.feedback!r}); nothing is taught")
        draft = await self._judge_draft(query, decision, **evaluate_kwargs) if decision.retrieve else None
        draft_correct = None if draft is None else draft.passing
        return JudgedResponse(answer, draft, self.gate.record_judged_feedback(decision, answer.passing, draft_correct))

    # ----------------------------------------------------------------- a batch run
    @staticmethod
    def recording() -> DecisionRecording:
        """A block that records the gate decisions fired in it, to pair a
        ``BatchEvalRunner`` run's results with the decisions behind its answers::

            with EvaluatorFeedback.recording() as decisions:
                results = await runner.aevaluate_queries(engine, queries=queries)
            await judge.ateach_batch(queries, results, decisions)
        """
        return DecisionRecording()

    def teach_batch(
        self,
        queries: Sequence[str],
        results: Mapping[str, Sequence[EvaluationResult]],
        decisions: Mapping[str, Sequence[GateDecision]] | Sequence[Any],
        **evaluate_kwargs_lists: Sequence[Any],
    ) -> list[JudgedQuery]:
        """``ateach_batch`` from synchronous code; what it raises is raised as it is."""
        return _run(self.ateach_batch(queries, results, decisions, **evaluate_kwargs_lists))

    async def ateach_batch(
        self,
        queries: Sequence[str],
        results: Mapping[str, Sequence[EvaluationResult]],
        decisions: Mapping[str, Sequence[GateDecision]] | Sequence[Any],
        **evaluate_kwargs_lists: Sequence[Any],
    ) -> list[JudgedQuery]:
        """Teach the gate a ``BatchEvalRunner`` run's verdicts, query by query.

        A query's answer was right when every evaluator of the run passed it. Its
        decision is taught that verdict (``Gate.record_judged_feedback``); when the
        answer was made with retrieval, the answer without it (the decision's own, or
        ``draft_llm``'s) is judged by this object's evaluator and taught too, as
        ``ateach`` does. The gate learns the queries in order, one observation each
        (the core has no batch form of feedback: each verdict weighs as one).

        Args:
            queries: the queries the runner was given, in its order.
            results: what ``aevaluate_queries`` (or ``aevaluate_responses``) returned:
                each evaluator's name to its results, one per query, in that order.
            decisions: the decision behind each answer: what ``recording()`` recorded
                around the run (a question's decisions are taken in the order they
                were fired, one per occurrence of the query), or one per query in
                order (a ``GateDecision``, or a response or metadata carrying one).
            evaluate_kwargs_lists: per-query arguments of this object's evaluator for
                the answers without retrieval, one list each (e.g. ``reference=[...]``,
                as the runner takes them).

        Raises:
            ValueError: the results or lists do not hold one entry per query, an
                evaluator gave no verdict on an answer (``passing`` is ``None``) or a
                query has no decision: nothing is taught.
            FeedbackNotSupportedError: the gate does not learn from feedback; nothing
                is judged.
        """
        self._check_learns()
        queries = list(queries)
        verdicts = _verdicts(queries, results)
        paired = _paired(queries, decisions)
        for name, values in evaluate_kwargs_lists.items():
            if isinstance(values, (str, bytes)) or len(values) != len(queries):
                raise ValueError(f"{name}= must hold one value per query ({len(queries)}); nothing is taught")
        drafts: list[EvaluationResult | None] = []
        for i, (query, decision) in enumerate(zip(queries, paired)):
            kwargs = {name: values[i] for name, values in evaluate_kwargs_lists.items()}
            drafts.append(await self._judge_draft(query, decision, **kwargs) if decision.retrieve else None)
        judged = []
        for query, decision, (answers, correct), draft in zip(queries, paired, verdicts, drafts):
            draft_correct = None if draft is None else draft.passing
            taught = self.gate.record_judged_feedback(decision, correct, draft_correct)
            judged.append(JudgedQuery(query, decision, answers, correct, draft, taught))
        return judged

    # ----------------------------------------------------------------- helpers
    def _check_learns(self) -> None:
        """``FeedbackNotSupportedError`` before anything is judged, when no verdict could
        teach the gate."""
        if not self.gate.learns_online:
            raise FeedbackNotSupportedError(
                f"{type(self.gate).__name__} does not learn from feedback (learns_online is False), so no"
                " verdict can teach it and nothing was judged; the SKR gates learn (alone, or in a budget,"
                " cascade or stacked gate)"
            )

    async def _judge_draft(self, query: str, decision: GateDecision, **evaluate_kwargs: Any) -> EvaluationResult | None:
        """The evaluator's result on the answer without retrieval (``None``: none to judge)."""
        text = decision.answer_without_retrieval
        if text is None and self.draft_llm is not None:
            text = (await self.draft_llm.acomplete(query)).text
        if text is None:
            return None
        return await self.evaluator.aevaluate(query=query, response=text, **evaluate_kwargs)


def _run(work: Coroutine[Any, Any, _T]) -> _T:
    """``work`` run to its end from synchronous code, by LlamaIndex's ``asyncio_run``
    (an event loop in this thread, or a thread of its own while one runs), raising what
    ``work`` raised: ``asyncio_run`` takes any ``RuntimeError`` (``NotImplementedError``,
    and so ``FeedbackNotSupportedError``, among them) for a loop problem and raises
    "Detected nested async" in its place."""

    async def caught() -> tuple[bool, Any]:
        try:
            return True, await work
        except Exception as exc:  # raised again below, outside asyncio_run
            return False, exc

    finished, value = asyncio_run(caught())
    if not finished:
        raise value
    return value


def _verdicts(
    queries: list[str], results: Mapping[str, Sequence[EvaluationResult]]
) -> list[tuple[dict[str, EvaluationResult], bool]]:
    """Each query's results by evaluator, and whether every evaluator passed its answer."""
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must map each evaluator's name to its results (BatchEvalRunner's output)")
    for name, listed in results.items():
        if len(listed) != len(queries):
            raise ValueError(
                f"evaluator {name!r} has {len(listed)} results for {len(queries)} queries; nothing is taught"
            )
    verdicts = []
    for i, query in enumerate(queries):
        answers = {name: listed[i] for name, listed in results.items()}
        for name, result in answers.items():
            if not isinstance(result, EvaluationResult):
                raise ValueError(f"evaluator {name!r}'s result {i} is no EvaluationResult: {result!r}")
            if result.query is not None and result.query.strip() != query.strip():
                raise ValueError(
                    f"evaluator {name!r}'s result {i} judged {result.query!r}, not query {i} {query!r}:"
                    " pass the queries in the runner's order"
                )
            if result.passing is None:
                raise ValueError(
                    f"evaluator {name!r} gave no verdict on the answer to {query!r} ({result.feedback!r});"
                    " nothing is taught"
                )
        verdicts.append((answers, all(bool(result.passing) for result in answers.values())))
    return verdicts


def _paired(queries: list[str], decisions: Mapping[str, Sequence[GateDecision]] | Sequence[Any]) -> list[GateDecision]:
    """The decision behind each query's answer (see ``ateach_batch``)."""
    if isinstance(decisions, Mapping):
        taken: defaultdict[str, int] = defaultdict(int)
        paired = []
        for query in queries:
            key = query.strip()
            fired = list(decisions.get(key, ()))
            if taken[key] >= len(fired):
                raise ValueError(
                    f"no gate decision was recorded for query {query!r} ({len(fired)} recorded for"
                    f" {taken[key] + 1} occurrences): run the batch inside recording(); nothing is taught"
                )
            paired.append(fired[taken[key]])
            taken[key] += 1
        return paired
    if isinstance(decisions, (str, bytes)) or len(decisions) != len(queries):
        raise ValueError(f"decisions must hold one per query ({len(queries)}), or be recording()'s")
    found = [item if isinstance(item, GateDecision) else decision_of(item) for item in decisions]
    missing = [i for i, decision in enumerate(found) if decision is None]
    if missing:
        raise ValueError(f"decisions {missing} carry no gate decision; nothing is taught")
    return [decision for decision in found if decision is not None]
