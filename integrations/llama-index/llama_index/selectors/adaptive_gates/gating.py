"""One gate decision per query, as the selector and the engines take it, always
observable.

The gate is asked by the core's door policy (``decide_or_fallback``), the same as
LangChain's: a bad question or a failing LLM comes back as the gate's fallback decision
with ``error`` set, and so does a gate that raises anything else (a bug in a custom
gate), with the exception recorded as its ``error``; the fallback retrieves unless the
gate was built with ``fallback_retrieve=False``. A gate that cannot decide at all is
raised: one not fitted (``NotFittedError``) or whose backend cannot serve it
(``BackendMisconfiguredError``: e.g. no log-probabilities for the log-prob gate), since
a fallback on every query would hide the setting to fix.

An empty query is refused before the gate runs (``InvalidQuestionError``): its fallback
would retrieve, and a retriever given no text fails inside the vector store. A query
given only as its embedding (an embedding-only ``QueryBundle``) is decided from that
embedding by a gate that can (``DecidesFromVectors``: SKR-kNN, SKR-cls, Thrust) and
refused for any other gate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from llama_index.core.instrumentation.dispatcher import Dispatcher

from adaptive_gates import Gate, GateDecision, InvalidQuestionError
from adaptive_gates.extend import (
    DIRECT,
    DRAFT,
    VECTOR_QUESTION,
    AnswerRoute,
    DecidesFromVectors,
    Feedback,
    adecide_or_fallback,
    decide_or_fallback,
)

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


def _fired(question: str, decision: GateDecision, on: Dispatcher) -> Decided:
    payload = decision.to_dict()
    fire_decision(question, decision, on, payload=payload)
    return Decided(decision, payload)


def vector_of(gate: Gate, question: str, embedding: Sequence[float] | None) -> Sequence[float] | None:
    """``embedding``, when ``gate`` is to decide from it: the query has no text but an
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
    return embedding


def decide(gate: Gate, question: str, on: Dispatcher, embedding: Sequence[float] | None = None) -> Decided:
    """``gate``'s decision on ``question``, fired as a ``GateDecisionEvent`` on ``on``
    from the caller's span (after a ``GateLLMCallEvent`` per request the gate sent its
    LLM). An empty ``question`` is decided from the query's ``embedding`` (see
    ``vector_of``), or raises ``InvalidQuestionError``."""
    vector = vector_of(gate, question, embedding)
    asked = question if vector is None else VECTOR_QUESTION
    with forwarding_unless_scoped(on):
        decision = decide_or_fallback(gate, asked, vector=vector)
    return _fired(asked, decision, on)


async def adecide(gate: Gate, question: str, on: Dispatcher, embedding: Sequence[float] | None = None) -> Decided:
    """``decide`` awaited: the gate's ``adecide`` / ``adecide_vector`` (worker thread or
    native async)."""
    vector = vector_of(gate, question, embedding)
    asked = question if vector is None else VECTOR_QUESTION
    with forwarding_unless_scoped(on):
        decision = await adecide_or_fallback(gate, asked, vector=vector)
    return _fired(asked, decision, on)


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
