"""Work written once for LangChain's blocking and awaited paths.

A piece of work that waits on LangChain (a runnable's call, a gate's decisions, a
custom event) is a generator that yields each step and is sent back what it gave
(or has the step's exception thrown in). ``run`` drives it blocking, ``arun``
awaiting, with the core's drivers (``adaptive_gates.gates.base.driving``), as a gate's rounds of
LLM requests are driven.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.runnables import Runnable, RunnableConfig

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import adecide_batch_or_fallback, adrive, decide_batch_or_fallback, drive, listening

from .llm_events import LLMCalls

T = TypeVar("T")


@dataclass(frozen=True)
class Invoke:
    """Call ``runnable`` on ``input`` with ``config``: gives its output."""

    runnable: Runnable
    input: Any
    config: RunnableConfig

    def run(self) -> Any:
        return self.runnable.invoke(self.input, self.config)

    async def arun(self) -> Any:
        return await self.runnable.ainvoke(self.input, self.config)


@dataclass(frozen=True)
class Decide:
    """``gate``'s decisions on ``texts``, with the LLM calls it made meanwhile, by the
    core's door policy (``decide_batch_or_fallback``: a gate that raises gives its
    recorded fallback; an unfitted or misconfigured one raises)."""

    gate: Gate
    texts: Sequence[str]

    def run(self) -> tuple[list[GateDecision], LLMCalls]:
        calls = LLMCalls()
        with listening(calls):
            return decide_batch_or_fallback(self.gate, list(self.texts)), calls

    async def arun(self) -> tuple[list[GateDecision], LLMCalls]:
        calls = LLMCalls()
        with listening(calls):
            return await adecide_batch_or_fallback(self.gate, list(self.texts)), calls


@dataclass(frozen=True)
class Dispatch:
    """Send the custom event ``name`` with ``data`` from the run of ``config``."""

    name: str
    data: Any
    config: RunnableConfig

    def run(self) -> None:
        dispatch_custom_event(self.name, self.data, config=self.config)

    async def arun(self) -> None:
        await adispatch_custom_event(self.name, self.data, config=self.config)


Step = Invoke | Decide | Dispatch
Steps = Generator[Step, Any, T]


def run(steps: Steps[T]) -> T:
    """Drive ``steps`` blocking."""
    return drive(steps, lambda step: step.run())


async def arun(steps: Steps[T]) -> T:
    """Drive ``steps``, awaiting each step."""
    return await adrive(steps, lambda step: step.arun())
