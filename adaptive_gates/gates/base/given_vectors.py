"""Deciding from a vector the caller already holds, for the gates that score one encoder
vector per question (the SKR memory gates, Thrust).

A framework may hold a query only as its embedding (LlamaIndex's embedding-only
``QueryBundle``). ``decide_vector`` takes that vector where the gate would have encoded
the question, so the whole decision (threshold, tie rules, listeners, fallbacks) is the
one ``decide`` takes. The vector must come from the gate's own encoder (same model, same
space): only its length can be checked here.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar

import numpy as np

from ...records.decision import GateDecision
from .gate import Gate

#: The ``question`` of a decision taken from a vector with no text.
VECTOR_QUESTION = "(a query given as its embedding)"

# The vectors given for the decision being taken in this context, by question; a
# ContextVar, so concurrent decisions (threads, tasks, ``asyncio.to_thread``) keep theirs.
_GIVEN: ContextVar[Mapping[str, np.ndarray] | None] = ContextVar("adaptive_gates_given_vectors", default=None)


class DecidesFromVectors(Gate):
    """A gate whose score reads nothing of a question but its encoder vector:
    ``decide_vector`` decides from a given vector instead of encoding the question. The
    gate encodes through ``given_or``."""

    @abstractmethod
    def _vector_dimension(self) -> int:
        """The length of the vectors this gate scores."""

    def decide_vector(self, vector: Sequence[float] | np.ndarray, question: str = VECTOR_QUESTION) -> GateDecision:
        """The decision ``decide(question)`` would take if the gate's encoder gave ``vector``
        for ``question`` (a label when there is no text: ``VECTOR_QUESTION``). A vector of
        the wrong length, or with NaN or inf, gives the gate's fallback decision with
        ``error`` saying so, as a bad question does."""
        given = self._checked_vector(vector, question)
        if isinstance(given, GateDecision):
            return given
        token = _GIVEN.set({question.strip(): given})
        try:
            return self.decide(question)
        finally:
            _GIVEN.reset(token)

    async def adecide_vector(
        self, vector: Sequence[float] | np.ndarray, question: str = VECTOR_QUESTION
    ) -> GateDecision:
        """``decide_vector`` awaited (the gate's ``adecide``)."""
        given = self._checked_vector(vector, question)
        if isinstance(given, GateDecision):
            return given
        token = _GIVEN.set({question.strip(): given})
        try:
            return await self.adecide(question)
        finally:
            _GIVEN.reset(token)

    def _checked_vector(self, vector: Sequence[float] | np.ndarray, question: str) -> np.ndarray | GateDecision:
        """``vector`` as a float32 row, or the fallback decision saying what is wrong with it."""
        array = np.asarray(vector, dtype=np.float32).reshape(-1)
        expected = self._vector_dimension()
        if array.size != expected:
            return self.fallback_decision(
                question,
                f"invalid query embedding: {array.size} values, but {self.name}'s encoder gives {expected};"
                " embed the query with the gate's own encoder",
            )
        if not np.all(np.isfinite(array)):
            return self.fallback_decision(question, "invalid query embedding: it holds NaN or inf")
        return array


def given_or(questions: list[str], encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """The vectors ``decide_vector`` gave for ``questions`` in this context, else
    ``encode(questions)``."""
    given = _GIVEN.get()
    if given is None or not all(question in given for question in questions):
        return encode(questions)
    return np.stack([given[question] for question in questions])
