"""One gate decision per query, as the selector and the engines take it: never an
exception, always observable.

The gate's own failures (a bad question, a failing LLM) already come back as its
fallback decision with ``error`` set. A gate that raises anyway (an unfitted gate, a
bug in a custom gate) must not take the user's query down either: the decision is
then the gate's fallback (retrieve unless it was built with ``fallback_retrieve=False``)
with the exception recorded as its ``error``. Only a backend that cannot serve the
gate at all (``BackendMisconfiguredError``: e.g. no log-probabilities for the log-prob
gate) is raised: a fallback on every query would hide the setting to fix.

An empty query is refused before the gate runs (``InvalidQuestionError``): its fallback
would retrieve, and a retriever given no text fails inside the vector store. A query
given only as its embedding (an embedding-only ``QueryBundle``) is decided from that
embedding by a gate that can (``DecidesFromVectors``: SKR-kNN, SKR-cls, Thrust) and
refused for any other gate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from llama_index.core.instrumentation.dispatcher import Dispatcher

from adaptive_gates import BackendMisconfiguredError, Gate, GateDecision, InvalidQuestionError
from adaptive_gates.extend import DIRECT, DRAFT, VECTOR_QUESTION, AnswerRoute, DecidesFromVectors, Feedback

from .events import fire_decision, forwarding_unless_scoped
from .reason import decision_of


class Decided(NamedTuple):
    """A decision and its JSON-ready dict (made once: events, reasons and response
    metadata all carry it)."""

    decision: GateDecision
    payload: dict[str, Any]


def asked_question(query_str: str) -> str:
    """``query_str``, the question a gate judges, when it holds any text.

    Raises:
        InvalidQuestionError: ``query_str`` is empty or whitespace. A gate's fallback on
            it would retrieve, and a retriever has no text to search by (LlamaIndex's
            vector stores then fail on a missing query embedding).
    """
    if not query_str.strip():
        raise InvalidQuestionError(
            f"the query is empty (query_str={query_str!r}): a gate judges the question's text and a"
            " retriever searches by it; pass the question (QueryBundle(query_str=...) or a non-empty str)"
        )
    return query_str


def raised_decision(gate: Gate, question: str, exc: BaseException) -> GateDecision:
    """The decision taken when ``gate`` raised: its fallback, with the exception as ``error``."""
    return gate.fallback_decision(question, f"the gate raised {type(exc).__name__}: {exc}")


def _fired(question: str, decision: GateDecision, on: Dispatcher) -> Decided:
    payload = decision.to_dict()
    fire_decision(question, decision, on, payload=payload)
    return Decided(decision, payload)


class _Taken:
    """The decision a ``_taking`` block took."""

    decision: GateDecision


@contextlib.contextmanager
def _taking(gate: Gate, question: str, on: Dispatcher) -> Iterator[_Taken]:
    """The block in which ``gate`` decides ``question``, shared by ``decide`` and
    ``adecide``: the gate's LLM calls in it are forwarded to ``on`` (to the user's
    dispatcher instead, once each, inside a ``forwarding_llm_calls`` block), and a gate
    that raises gets ``raised_decision``."""
    taken = _Taken()
    with forwarding_unless_scoped(on):
        try:
            yield taken
        except BackendMisconfiguredError:
            raise  # a setting to fix, not a passing failure
        except Exception as exc:  # a gate must not take the query down
            taken.decision = raised_decision(gate, question, exc)


def by_embedding(gate: Gate, question: str, embedding: Sequence[float] | None) -> DecidesFromVectors | None:
    """``gate``, when it is to decide from ``embedding``: the query has no text but an
    embedding, and the gate decides from vectors. ``None``: it judges ``question``.

    Raises:
        InvalidQuestionError: the query has no text, and no embedding the gate can read.
    """
    if question.strip():
        return None
    if embedding is None:
        asked_question(question)
    if not isinstance(gate, DecidesFromVectors):
        raise InvalidQuestionError(
            f"the query has no text, only an embedding, and the {gate.name} gate judges the question's"
            " text (the SKR-kNN, SKR-cls and Thrust gates decide from an embedding); pass the question"
        )
    return gate


def decide(gate: Gate, question: str, on: Dispatcher, embedding: Sequence[float] | None = None) -> Decided:
    """``gate``'s decision on ``question``, fired as a ``GateDecisionEvent`` on ``on``
    from the caller's span (after a ``GateLLMCallEvent`` per request the gate sent its
    LLM). An empty ``question`` is decided from the query's ``embedding`` (see
    ``by_embedding``), or raises ``InvalidQuestionError``."""
    vector_gate = by_embedding(gate, question, embedding)
    asked = question if vector_gate is None else VECTOR_QUESTION
    with _taking(gate, asked, on) as taken:
        taken.decision = gate.decide(question) if vector_gate is None else vector_gate.decide_vector(embedding or [])
    return _fired(asked, taken.decision, on)


async def adecide(gate: Gate, question: str, on: Dispatcher, embedding: Sequence[float] | None = None) -> Decided:
    """``decide`` awaited: the gate's ``adecide`` / ``adecide_vector`` (worker thread or
    native async)."""
    vector_gate = by_embedding(gate, question, embedding)
    asked = question if vector_gate is None else VECTOR_QUESTION
    with _taking(gate, asked, on) as taken:
        if vector_gate is None:
            taken.decision = await gate.adecide(question)
        else:
            taken.decision = await vector_gate.adecide_vector(embedding or [])
    return _fired(asked, taken.decision, on)


def route_of(decision: GateDecision, reuse_draft: bool = True) -> AnswerRoute:
    """How to answer after ``decision`` (one of ``ROUTES``): its ``route``, with a
    ``draft`` answered directly when drafts are not reused."""
    route = decision.route
    return DIRECT if route == DRAFT and not reuse_draft else route


def response_feedback(gate: Gate, response: Any, correct: bool) -> Feedback:
    """Teach ``gate`` the verdict on an answer: the decision the response carries (see
    ``decision_of``) and whether the answer was correct (``Gate.record_decision_feedback``),
    so a gate that learns online (the SKR gates, a stacked gate's log, a budget's or
    cascade's members) decides later queries from it.

    Raises:
        ValueError: the response carries no gate decision.
        FeedbackNotSupportedError: the gate does not learn from feedback.
    """
    decision = decision_of(response)
    if decision is None:
        raise ValueError(
            "the response carries no gate decision: pass a response of an AdaptiveQueryEngine, an "
            "AdaptiveChatEngine or a RouterQueryEngine whose selector is a GateSelector"
        )
    return gate.record_decision_feedback(decision, correct)
