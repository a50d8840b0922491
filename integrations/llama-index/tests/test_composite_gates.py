"""The core's budget, cascade and popularity gates select in real LlamaIndex routers as any gate does."""

from __future__ import annotations

from llama_index.core.indices import EmptyIndex
from llama_index.core.retrievers import RouterRetriever
from llama_index.core.tools import RetrieverTool
from llama_index.selectors.adaptive_gates import GateDecisionEvent, GateLLMCallEvent, GateSelector

from adaptive_gates import BudgetedGate, CascadeGate, PopularityGate, VerbalizedGate
from adaptive_gates.models import ChatReply

from .conftest import KNOWN, UNKNOWN
from .doubles import ScriptedChat


def _router_retriever(gate, index) -> RouterRetriever:
    """Choice 0 retrieves nothing, choice 1 two Wikipedia paragraphs."""
    return RouterRetriever(
        selector=GateSelector(gate),
        retriever_tools=[
            RetrieverTool.from_defaults(EmptyIndex().as_retriever(), description="No documents."),
            RetrieverTool.from_defaults(index.as_retriever(similarity_top_k=2), description="Wikipedia paragraphs."),
        ],
    )


def test_a_budget_holds_its_rate_over_routed_retrievals(index, boolq_questions, recorder):
    questions = [r.question for r in boolq_questions]
    calibration, traffic = questions[:20], questions[20:]
    bare = PopularityGate().calibrate(calibration, target_rate=0.6)
    budget = BudgetedGate(PopularityGate(), target_rate=0.25, window=len(traffic)).calibrate(calibration)

    unbudgeted = [bool(_router_retriever(bare, index).retrieve(q)) for q in traffic]
    routed = _router_retriever(budget, index)
    retrieved = [bool(routed.retrieve(q)) for q in traffic]

    assert sum(unbudgeted) >= 0.45 * len(traffic)  # the popularity gate alone retrieves far more
    assert 0 < sum(retrieved) <= 0.25 * len(traffic)
    decisions = [e.decision for e in recorder.of(GateDecisionEvent) if e.decision["gate"] == "budget"]
    assert [d["retrieve"] for d in decisions] == retrieved
    assert decisions[-1]["details"]["budget"]["window_rate"] == sum(retrieved) / len(traffic)


def test_a_cascade_asks_the_llm_only_inside_its_band(knn_gate, index, recorder):
    chat = ScriptedChat(ChatReply("Nobody knows. uncertain"))
    cascade = CascadeGate(knn_gate, VerbalizedGate(chat, judge=False, top_logprobs=0), band=(0.5, 1.0))
    retriever = _router_retriever(cascade, index)

    assert retriever.retrieve(KNOWN[0]) == [] and chat.calls == []  # outside the band: no LLM call
    assert len(retriever.retrieve(UNKNOWN[0])) == 2 and len(chat.calls) == 1  # escalated; unsure: retrieve

    (llm_call,) = recorder.of(GateLLMCallEvent)
    assert llm_call.call["gate"] == "verbalized"
    known, unknown = (e.decision for e in recorder.of(GateDecisionEvent))
    assert known["details"]["stage"] == "cheap" and unknown["details"]["stage"] == "costly"
    assert unknown["llm_calls"] == 1
