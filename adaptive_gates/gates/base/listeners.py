"""Decision listeners: observe every decision a gate takes, and every LLM call it makes
to take it, without wrapping the gate.

A listener is any object with ``on_decision(decision)`` and/or ``on_llm_call(event)``
(the ``Listener`` type; ``DecisionListener`` has both as no-ops, to subclass). Attach it to one gate with
``gate.add_listener``, or to everything decided inside a block with ``listening``,
which is scoped by ``contextvars``: it holds in the threads that ``asyncio.to_thread``
and the chat backends start (they run in a copy of the caller's context) and in the
asyncio tasks created inside the block, and nowhere else, so concurrent runs each see
only their own decisions. The framework integrations turn these calls into their
events.

A listener never breaks a decision: whatever it raises is logged and swallowed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...models.chat.base import ChatReply
    from ...records.decision import GateDecision

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LLMCallEvent:
    """One request a gate made to its chat model, as it ended.

    Attributes:
        gate: the name of the gate that asked (``None`` outside a gate's scoring).
        model_id: the chat model asked.
        purpose: what the request was for: ``"answer+certainty"``, ``"answer"``,
            ``"challenge"`` or ``"judgement"`` (verbalized gate), ``"skr-prompt"`` or
            ``"skr-icl"`` (the SKR prompt gates).
        messages: the conversation sent.
        reply: the reply's text; ``None`` when the request failed.
        error: why the request failed (``"TypeName: message"``); ``None`` when it did not.
        latency_ms: the request's wall time (a share of the batch's time when the
            backend answers a batch at once).
    """

    gate: str | None
    model_id: str
    purpose: str
    messages: tuple[Mapping[str, str], ...]
    reply: str | None
    error: str | None
    latency_ms: float


class ListensToDecisions(Protocol):
    """A listener told of every decision."""

    def on_decision(self, decision: GateDecision, /) -> None: ...


class ListensToLLMCalls(Protocol):
    """A listener told of every LLM call."""

    def on_llm_call(self, event: LLMCallEvent, /) -> None: ...


#: What ``Gate.add_listener`` and ``listening`` take: an object with either method (or both).
Listener = ListensToDecisions | ListensToLLMCalls


class DecisionListener:
    """What a listener may implement; both methods are optional (any object with
    either one is a listener) and do nothing here."""

    def on_decision(self, decision: GateDecision) -> None:
        """Called once for every decision a gate returns, fallbacks included."""

    def on_llm_call(self, event: LLMCallEvent) -> None:
        """Called once for every request to the chat model a gate makes, as it ends."""


#: Listeners attached by ``listening`` blocks around the current code.
_scoped: ContextVar[tuple[Listener, ...]] = ContextVar("decision_listeners", default=())
#: The gate whose scoring is running here, and its own listeners (for its LLM calls).
_asking: ContextVar[tuple[str, tuple[Listener, ...]] | None] = ContextVar("asking_gate", default=None)


@contextlib.contextmanager
def listening(*listeners: Listener) -> Iterator[None]:
    """Every decision and LLM call made inside the block (in this thread or task, and in
    the threads and tasks it starts) is also sent to ``listeners``."""
    for listener in listeners:
        check_listener(listener)
    token = _scoped.set((*_scoped.get(), *listeners))
    try:
        yield
    finally:
        _scoped.reset(token)


@contextlib.contextmanager
def gate_asking(gate: str, own: tuple[Listener, ...]) -> Iterator[None]:
    """Marks the block as ``gate``'s scoring, so the LLM calls made in it are reported
    under its name and to its own listeners ``own``."""
    token = _asking.set((gate, own))
    try:
        yield
    finally:
        _asking.reset(token)


def notify_decisions(decisions: Sequence[GateDecision], own: tuple[Listener, ...]) -> None:
    """Send each decision to a gate's own listeners ``own`` and the scoped ones."""
    listeners = (*own, *_scoped.get())
    for decision in decisions:
        _notify(listeners, "on_decision", decision)


def notify_llm_call(
    model_id: str,
    purpose: str,
    messages: Sequence[Mapping[str, str]],
    outcome: ChatReply | BaseException,
    latency_ms: float,
) -> None:
    """Report one ended request to the listeners of the gate asking and the scoped ones."""
    asking = _asking.get()
    gate, own = asking if asking is not None else (None, ())
    listeners = (*own, *_scoped.get())
    if not listeners:
        return
    failed = isinstance(outcome, BaseException)
    event = LLMCallEvent(
        gate=gate,
        model_id=model_id,
        purpose=purpose,
        messages=tuple(dict(m) for m in messages),
        reply=None if isinstance(outcome, BaseException) else outcome.text,
        error=f"{type(outcome).__name__}: {outcome}" if failed else None,
        latency_ms=latency_ms,
    )
    _notify(listeners, "on_llm_call", event)


def _notify(listeners: tuple[Listener, ...], method: str, payload: object) -> None:
    for listener in listeners:
        callback = getattr(listener, method, None)
        if callback is None:
            continue
        try:
            callback(payload)
        except Exception:  # observing must never change or break a decision
            logger.exception("listener %r failed in %s; ignored", listener, method)


def check_listener(listener: object) -> None:
    """``TypeError`` unless ``listener`` has at least one of the two methods."""
    if not any(callable(getattr(listener, m, None)) for m in ("on_decision", "on_llm_call")):
        raise TypeError(f"a listener needs on_decision or on_llm_call; {listener!r} has neither")
