"""How a framework's door asks a gate for a decision: one policy for every door.

A gate's own ``decide`` already turns a bad question or a failing backend into its
fallback decision. What is left is a gate that raises anyway, and the doors (a
LangChain runnable, a LlamaIndex selector, engine or retriever) must treat it alike:
``decide_or_fallback`` and its batch and awaited forms are what they call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ...errors import BackendMisconfiguredError, NotFittedError
from ...records.decision import GateDecision
from .gate import Gate
from .given_vectors import DecidesFromVectors
from .listeners import notify_decisions

logger = logging.getLogger(__name__)

#: What a door raises instead of deciding: the gate cannot decide at all, whatever the
#: question, and a fallback on every question would hide the mistake to fix (a gate
#: used before ``fit``/``load``; a backend that cannot serve it, e.g. one without
#: log-probabilities for the log-prob gate).
RAISED_BY_DOORS: tuple[type[Exception], ...] = (NotFittedError, BackendMisconfiguredError)


def decide_batch_or_fallback(gate: Gate, questions: Sequence[str]) -> list[GateDecision]:
    """``gate``'s decisions on ``questions`` by the doors' policy (``decide_or_fallback``)."""
    try:
        return gate.decide_batch(questions)
    except RAISED_BY_DOORS:
        raise
    except Exception as exc:  # a gate must not take the user's chain down
        return raised_fallbacks(gate, list(questions), exc)


async def adecide_batch_or_fallback(gate: Gate, questions: Sequence[str]) -> list[GateDecision]:
    """``decide_batch_or_fallback`` awaited (the gate's ``adecide_batch``)."""
    try:
        return await gate.adecide_batch(questions)
    except RAISED_BY_DOORS:
        raise
    except Exception as exc:  # a gate must not take the user's chain down
        return raised_fallbacks(gate, list(questions), exc)


def decide_or_fallback(
    gate: Gate, question: str, *, vector: Sequence[float] | np.ndarray | None = None
) -> GateDecision:
    """``gate``'s decision on ``question``, as every framework door takes it.

    The policy, the same in LangChain and LlamaIndex:

    - a bad question or a failing LLM or backend: the gate's own fallback decision
      (retrieve unless it was built with ``fallback_retrieve=False``), with ``error``
      set and logged (``Gate.decide``);
    - a gate that raises anything else (a bug in a custom gate, a failure a composite
      let through): the same recorded fallback, with the exception as ``error``,
      logged with its trace and sent to the gate's listeners; a failing gate never
      takes the user's chain down;
    - a gate that cannot decide at all because it is misused or misconfigured
      (``NotFittedError``: not fitted or loaded; ``BackendMisconfiguredError``: a
      backend that cannot serve it) raises that error: a fallback on every question
      would hide the setting to fix.

    With ``vector`` the gate decides from that embedding of the question
    (``DecidesFromVectors.decide_vector``; ``question`` labels the decision, e.g.
    ``VECTOR_QUESTION``).

    Raises:
        NotFittedError: the gate is not fitted.
        BackendMisconfiguredError: the gate's backend cannot serve it.
        TypeError: ``vector`` is given to a gate that does not decide from vectors.
    """
    vector_gate = None if vector is None else _vector_gate(gate)
    try:
        if vector_gate is None or vector is None:
            return gate.decide(question)
        return vector_gate.decide_vector(vector, question)
    except RAISED_BY_DOORS:
        raise
    except Exception as exc:  # a gate must not take the user's chain down
        return raised_fallbacks(gate, [question], exc)[0]


async def adecide_or_fallback(
    gate: Gate, question: str, *, vector: Sequence[float] | np.ndarray | None = None
) -> GateDecision:
    """``decide_or_fallback`` awaited (the gate's ``adecide`` / ``adecide_vector``)."""
    vector_gate = None if vector is None else _vector_gate(gate)
    try:
        if vector_gate is None or vector is None:
            return await gate.adecide(question)
        return await vector_gate.adecide_vector(vector, question)
    except RAISED_BY_DOORS:
        raise
    except Exception as exc:  # a gate must not take the user's chain down
        return raised_fallbacks(gate, [question], exc)[0]


def _vector_gate(gate: Gate) -> DecidesFromVectors:
    if not isinstance(gate, DecidesFromVectors):
        raise TypeError(
            f"the {gate.name} gate judges the question's text and cannot decide from a vector"
            " (the SKR-kNN, SKR-cls and Thrust gates can)"
        )
    return gate


def raised_fallbacks(gate: Gate, questions: list[str], exc: Exception) -> list[GateDecision]:
    """The decisions taken when ``gate`` raised ``exc`` on ``questions``: its fallback on
    each, with the exception as ``error``, logged with its trace and sent to the gate's
    listeners (as the gate's own decisions are)."""
    logger.error("%s: the gate raised %s", gate.name, type(exc).__name__, exc_info=exc)
    error = f"the gate raised {type(exc).__name__}: {exc}"
    decisions = [gate.fallback_decision(question, error) for question in questions]
    notify_decisions(decisions, gate.listeners)
    return decisions
