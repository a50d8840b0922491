"""Work written once for blocking and awaited callers.

A piece of work that waits on something (a gate's rounds of LLM requests, a cascade's
member gates, a framework's runnables) is a generator: it yields each step, is sent
back what the step gave, or has the step's exception thrown in, and returns its
result. ``drive`` runs the steps blocking, ``adrive`` awaiting; only the awaits differ.
The generator is closed on the way out, so a drive cut short (an exception, a
cancellation) ends the work's open scopes there, not whenever it is collected.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Step = TypeVar("Step")
T = TypeVar("T")

#: Work as steps: yields each ``Step``, is sent what it gave, returns a ``T``.
Work = Generator[Step, Any, T]


@dataclass(frozen=True)
class _Done(Generic[T]):
    value: T


def _resume(work: Work[Step, T], sent: Any, raised: Exception | None) -> Step | _Done[T]:
    """The next step of ``work`` after sending it ``sent`` (or throwing in ``raised``);
    ``_Done`` with its result once it returns. (A ``StopIteration`` cannot cross a
    future, so a worker thread gives back ``_Done`` instead.)"""
    try:
        return work.throw(raised) if raised is not None else work.send(sent)
    except StopIteration as done:
        return _Done(done.value)


def drive(work: Work[Step, T], step: Callable[[Step], Any]) -> T:
    """Run ``work`` blocking: each yielded step is given to ``step``, and what that
    returns (or raises) goes back into the work."""
    with contextlib.closing(work):
        sent, raised = None, None
        while not isinstance(next_step := _resume(work, sent, raised), _Done):
            try:
                sent, raised = step(next_step), None
            except Exception as exc:  # the work decides what a failing step means
                sent, raised = None, exc
        return next_step.value


async def adrive(work: Work[Step, T], astep: Callable[[Step], Awaitable[Any]], *, resume_in_thread: bool = False) -> T:
    """``drive`` awaiting ``astep``. With ``resume_in_thread``, the work's own
    computing between steps (prompts, embeddings, parsing) runs in a worker thread, so
    the event loop is never blocked by it."""
    with contextlib.closing(work):
        sent, raised = None, None
        while True:
            if resume_in_thread:
                next_step = await asyncio.to_thread(_resume, work, sent, raised)
            else:
                next_step = _resume(work, sent, raised)
            if isinstance(next_step, _Done):
                return next_step.value
            try:
                sent, raised = await astep(next_step), None
            except Exception as exc:  # as in drive
                sent, raised = None, exc
