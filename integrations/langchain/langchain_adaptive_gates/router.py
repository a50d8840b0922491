"""``gated_router``: a gate choosing, per input, between a direct and a retrieval chain.

It builds LangChain's recommended routing form, a runnable that returns the runnable to
run: ``decide | RunnableLambda(route)``. So every mode works as LangChain's own
(``invoke``, ``batch``, ``ainvoke``, ``abatch``, ``stream``, ``astream``,
``astream_events``), a batch is decided in one ``decide_batch`` call, and the chosen
branch streams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adaptive_gates import Gate, GateDecision
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda, RunnableSerializable
from langchain_core.runnables.base import RunnableSequence
from langchain_core.runnables.config import get_config_list
from pydantic import ConfigDict

from .gate_runnable import GateRunnable, decision_payload

#: Tag on the chosen branch's run: ``adaptive-gates:retrieve``, ``…:direct`` or ``…:draft``.
TAG_PREFIX = "adaptive-gates:"
#: Metadata key of the chosen branch's run holding the decision (as a dict).
METADATA_KEY = "gate_decision"


@dataclass(frozen=True)
class Routed:
    """An input with the gate's decision on it (what the route step receives)."""

    input: Any
    decision: GateDecision


class _Decide(RunnableSerializable[Any, Routed]):
    """Pairs each input with its decision; the gate runnable's runs are its trace."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    gate: GateRunnable

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Routed:
        return Routed(input, self.gate.invoke(input, config))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Routed:
        return Routed(input, await self.gate.ainvoke(input, config))

    def batch(self, inputs: list[Any], config: Any = None, *, return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        decisions = self.gate.batch(inputs, get_config_list(config, len(inputs)), return_exceptions=return_exceptions)
        return [d if isinstance(d, Exception) else Routed(x, d) for x, d in zip(inputs, decisions)]

    async def abatch(
        self, inputs: list[Any], config: Any = None, *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[Any]:
        configs = get_config_list(config, len(inputs))
        decisions = await self.gate.abatch(inputs, configs, return_exceptions=return_exceptions)
        return [d if isinstance(d, Exception) else Routed(x, d) for x, d in zip(inputs, decisions)]


def _routed_input(routed: Routed) -> Any:
    return routed.input


async def _arouted_input(routed: Routed) -> Any:
    return routed.input


class _Route:
    """The route step: the branch for a decision, tagged with it, fed the original input.

    The router's own steps have async twins, so ``ainvoke`` runs them on the event
    loop instead of sending each to a worker thread (a thread hop costs more than
    the step).
    """

    def __init__(self, direct: Runnable, retrieval: Runnable, draft: Callable[[GateDecision], Any] | None) -> None:
        unwrap = RunnableLambda(_routed_input, afunc=_arouted_input, name="routed_input")
        self.direct = unwrap | direct
        self.retrieval = unwrap | retrieval
        self.draft = draft

    def __call__(self, routed: Routed) -> Runnable:
        decision = routed.decision
        if decision.retrieve:
            branch, label = self.retrieval, "retrieve"
        elif decision.draft_answer is not None and self.draft is not None:
            draft = self.draft

            async def adraft(r: Routed) -> Any:
                return draft(r.decision)

            branch, label = RunnableLambda(lambda r: draft(r.decision), afunc=adraft, name="draft_answer"), "draft"
        else:
            branch, label = self.direct, "direct"
        return branch.with_config(
            run_name=f"{label}_branch",
            tags=[TAG_PREFIX + label, f"{TAG_PREFIX}gate:{decision.gate}"],
            metadata={METADATA_KEY: decision_payload(decision)},
        )

    async def aroute(self, routed: Routed) -> Runnable:
        """``__call__`` for the async path."""
        return self(routed)


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
    route = _Route(_coerce(direct, "direct"), _coerce(retrieval, "retrieval"), draft)
    return RunnableSequence(_Decide(gate=gate_runnable), RunnableLambda(route, afunc=route.aroute, name="route"), name="gated_router")


def _coerce(branch: Runnable | Callable[..., Any], name: str) -> Runnable:
    if isinstance(branch, Runnable):
        return branch
    if callable(branch):
        return RunnableLambda(branch, name=name)
    raise TypeError(f"{name} must be a Runnable or a callable, got {type(branch).__name__}")
