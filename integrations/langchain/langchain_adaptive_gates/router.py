"""``gated_router``: a gate choosing, per input, between a direct and a retrieval chain.

It is LangChain's recommended routing form, a runnable that returns the runnable to
run: one ``RunnableLambda`` whose function decides and returns the chosen branch, which
LangChain then runs on the same input. So every mode works as LangChain's own
(``invoke``, ``ainvoke``, ``stream``, ``astream``, ``astream_events``) and the chosen
branch streams; ``batch``/``abatch`` decide all inputs in one ``decide_batch`` call. A
call makes three runs: the router's, the gate's and the chosen branch's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.config import get_executor_for_config
from langchain_core.runnables.utils import gather_with_concurrency

from adaptive_gates import Gate, GateDecision

from . import steps
from .gate_runnable import GateRunnable

#: Tag on the chosen branch's run: ``adaptive-gates:retrieve``, ``…:direct`` or ``…:draft``.
TAG_PREFIX = "adaptive-gates:"
#: Metadata key of the chosen branch's run holding the decision (as a dict).
METADATA_KEY = "gate_decision"


class _GatedRouter(RunnableLambda):
    """Decides, then returns the branch for the decision, tagged with it.

    Its function and every branch it builds have async twins, so ``ainvoke`` keeps the
    router's own work on the event loop (a thread hop costs more than the work).
    """

    def __init__(
        self, gate: GateRunnable, direct: Runnable, retrieval: Runnable, draft: Callable[[GateDecision], Any] | None
    ) -> None:
        super().__init__(self._choose, afunc=self._achoose, name="gated_router")
        self.gate = gate
        self.direct = direct
        self.retrieval = retrieval
        self.draft = draft

    def _choose(self, input: Any, config: RunnableConfig) -> Runnable:
        return self._branch_for(self.gate.invoke(input, config))

    async def _achoose(self, input: Any, config: RunnableConfig) -> Runnable:
        return self._branch_for(await self.gate.ainvoke(input, config))

    def _branch_for(self, decision: GateDecision) -> Runnable:
        if decision.retrieve:
            branch, label = self.retrieval, "retrieve"
        elif decision.draft_answer is not None and self.draft is not None:
            branch, label = _draft_branch(self.draft, decision), "draft"
        else:
            branch, label = self.direct, "direct"
        return branch.with_config(
            run_name=f"{label}_branch",
            tags=[TAG_PREFIX + label, f"{TAG_PREFIX}gate:{decision.gate}"],
            metadata={METADATA_KEY: decision.to_dict()},
        )

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        run = functools.partial(self._route_all, return_exceptions=return_exceptions)
        return self._batch_with_config(run, list(inputs), config, return_exceptions=return_exceptions, run_type="chain")

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        run = functools.partial(self._aroute_all, return_exceptions=return_exceptions)
        return await self._abatch_with_config(
            run, list(inputs), config, return_exceptions=return_exceptions, run_type="chain"
        )

    def _route_all(self, inputs: list[Any], config: list[RunnableConfig], *, return_exceptions: bool) -> list[Any]:
        """One ``decide_batch`` for all inputs, then each chosen branch, concurrently."""
        decisions = self.gate.batch(inputs, config, return_exceptions=return_exceptions)
        answers = self._answers(inputs, decisions, config, return_exceptions)
        if len(answers) == 1:
            return [steps.run(answers[0])]
        with get_executor_for_config(config[0]) as executor:
            return list(executor.map(steps.run, answers))

    async def _aroute_all(
        self, inputs: list[Any], config: list[RunnableConfig], *, return_exceptions: bool
    ) -> list[Any]:
        """``_route_all`` on the event loop."""
        decisions = await self.gate.abatch(inputs, config, return_exceptions=return_exceptions)
        answers = self._answers(inputs, decisions, config, return_exceptions)
        return await gather_with_concurrency(config[0].get("max_concurrency"), *map(steps.arun, answers))

    def _answers(
        self,
        inputs: list[Any],
        decisions: Sequence[GateDecision | Exception],
        config: list[RunnableConfig],
        return_exceptions: bool,
    ) -> list[steps.Steps[Any]]:
        """Each input's answer from the branch its decision chose, written once for both
        paths (``steps``): a failed decision is its input's answer, and so is a failing
        branch's exception under ``return_exceptions``."""
        return [self._answer(x, d, c, return_exceptions) for x, d, c in zip(inputs, decisions, config)]

    def _answer(
        self, value: Any, decision: GateDecision | Exception, config: RunnableConfig, return_exceptions: bool
    ) -> steps.Steps[Any]:
        if isinstance(decision, Exception):
            return decision
        try:
            return (yield steps.Invoke(self._branch_for(decision), value, config))
        except Exception as exc:
            if return_exceptions:
                return exc
            raise


def _draft_branch(draft: Callable[[GateDecision], Any], decision: GateDecision) -> Runnable:
    """A branch answering ``draft(decision)`` whatever its input."""

    def answer(_: Any) -> Any:
        return draft(decision)

    async def aanswer(_: Any) -> Any:
        return draft(decision)

    return RunnableLambda(answer, afunc=aanswer, name="draft_answer")


def draft_text(decision: GateDecision) -> str:
    """The default answer for a draft: the gate's draft answer as a string."""
    return decision.draft_answer or ""


def gated_router(
    gate: Gate | GateRunnable,
    *,
    direct: Runnable | Callable[..., Any],
    retrieval: Runnable | Callable[..., Any],
    draft: Callable[[GateDecision], Any] | None = draft_text,
    **gate_options: Any,
) -> Runnable:
    """A runnable that sends each input to ``retrieval`` when ``gate`` says retrieve and
    to ``direct`` otherwise.

    Both branches receive the input unchanged (a question string, a dict, a message
    list: see ``GateRunnable``). When the gate already answered (a confident
    verbalized reply) the direct branch is skipped and ``draft(decision)`` is the
    output (the draft text by default; ``draft=None`` always runs ``direct``; give a
    function returning an ``AIMessage`` when the direct branch returns messages).

    The decision is dispatched as the custom event ``DECISION_EVENT`` and is in the
    chosen branch run's metadata (``METADATA_KEY``) and tags (``TAG_PREFIX`` + label).
    Per-request control comes from ``configurable``. ``gate_options`` go to
    ``GateRunnable`` when a bare gate is given.
    """
    gate_runnable = gate if isinstance(gate, GateRunnable) else GateRunnable(gate, **gate_options)
    if gate_options and isinstance(gate, GateRunnable):
        raise ValueError("gate options apply to a bare gate; configure the GateRunnable itself")
    return _GatedRouter(gate_runnable, _coerce(direct, "direct"), _coerce(retrieval, "retrieval"), draft)


def _coerce(branch: Runnable | Callable[..., Any], name: str) -> Runnable:
    """``branch`` as LangChain coerces it (``coerce_to_runnable``), a function traced
    under the branch's name."""
    runnable = coerce_to_runnable(branch)
    return runnable if isinstance(branch, Runnable) else runnable.with_config(run_name=name)
