"""The route of a decision, decided once in ``GateDecision.route``, and the server
answering by it: a blank draft is no answer to serve."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from adaptive_gates import ROUTES, GateDecision, PopularityGate
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.serve import ChatService, UpstreamError


def decision(retrieve: bool, draft: str | None) -> GateDecision:
    return GateDecision(retrieve, 0.9 if retrieve else 0.1, 0.5, "g", question="q", draft_answer=draft)


@pytest.mark.parametrize(
    "retrieve, draft, route",
    [
        (True, None, "retrieve"),
        (True, "Paris", "retrieve"),  # a draft beside retrieval is not served
        (False, None, "direct"),
        (False, "", "direct"),
        (False, "  \n", "direct"),
        (False, "Paris", "draft"),
    ],
)
def test_the_route_follows_the_verdict_and_a_usable_draft(retrieve, draft, route):
    assert decision(retrieve, draft).route == route
    assert route in ROUTES


def test_forced_and_fallback_decisions_route_by_their_verdict():
    assert GateDecision.forced("q", "g", "never").route == "direct"
    assert GateDecision.forced("q", "g", "always").route == "retrieve"
    assert GateDecision.fallback("q", "g", True, "timed out").route == "retrieve"
    assert GateDecision.fallback("q", "g", False, "timed out").route == "direct"


class Drafting(PopularityGate):
    """A popularity gate whose decisions carry a fixed draft answer."""

    def __init__(self, draft: str) -> None:
        super().__init__()
        self.draft = draft

    def decide(self, question: str) -> GateDecision:
        return dataclasses.replace(super().decide(question), retrieve=False, draft_answer=self.draft)

    async def adecide(self, question: str) -> GateDecision:
        return self.decide(question)


@pytest.mark.parametrize("draft, route", [("", "direct"), ("  ", "direct"), ("Paris", "draft")])
def test_the_server_serves_a_draft_only_when_it_is_usable(draft, route, corpus_path):
    unreachable = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", max_retries=0)  # a draft asks no upstream
    service = ChatService(Drafting(draft), BM25Retriever.from_jsonl(corpus_path), unreachable)

    async def first_piece() -> tuple[str | None, dict]:
        stream = service.answer_stream([{"role": "user", "content": "What is the capital of France?"}], {})
        try:
            return await anext(stream), stream.summary or {}
        except UpstreamError:  # not a draft: the upstream was asked
            return None, stream.summary or {}

    served, summary = asyncio.run(first_piece())
    assert summary["route"] == route
    assert served == (draft if route == "draft" else None)


def test_a_decision_taken_again_serves_the_draft_it_wrote_where_it_stops_retrieving(lm):
    """``retaken_at`` with the real log-prob gate: the draft it wrote before deciding is
    served once a threshold says "answer directly", and dropped where it says "retrieve"."""
    from adaptive_gates import LogprobGate
    from adaptive_gates.models import LocalChatModel

    gate = LogprobGate(LocalChatModel(lm), max_tokens=6)
    decision = gate.decide("What is the capital of France?")
    assert decision.answer_without_retrieval and not decision.is_fallback
    always = gate.retaken_at(decision, float("-inf"))
    assert always.retrieve and always.draft_answer is None and always.route == "retrieve"
    never = gate.retaken_at(always, float("inf"))  # from a retrieving decision: the draft comes back
    assert not never.retrieve and never.draft_answer == decision.answer_without_retrieval and never.route == "draft"
