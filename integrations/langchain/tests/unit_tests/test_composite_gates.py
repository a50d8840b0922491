"""The core's budget, cascade and popularity gates route real LangChain runs as any gate does."""

import uuid

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda

from adaptive_gates import BudgetedGate, CascadeGate, PopularityGate, VerbalizedGate
from langchain_adaptive_gates import DECISION_EVENT, LLM_CALL_EVENT, GateFeedback, LangChainChatModel, gated_router

from .chat_doubles import scripted

KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"


def _router(gate):
    return gated_router(gate, direct=RunnableLambda(lambda q: "direct"), retrieval=RunnableLambda(lambda q: "rag"))


class _CustomEvents(BaseCallbackHandler):
    def __init__(self):
        self.names = []

    def on_custom_event(self, name, data, *, run_id, **kwargs):
        self.names.append(name)


def test_a_budget_holds_its_rate_over_a_routed_batch(boolq_rows):
    questions = [r["question"] for r in boolq_rows(120)]
    calibration, traffic = questions[:80], questions[80:]
    bare = PopularityGate().calibrate(calibration, target_rate=0.6)
    budget = BudgetedGate(PopularityGate(), target_rate=0.25, window=len(traffic)).calibrate(calibration)
    seen = GateFeedback(budget)
    configs = [{"callbacks": [seen], "run_id": uuid.uuid4()} for _ in traffic]

    unbudgeted = _router(bare).batch(traffic)
    routed = _router(budget).batch(traffic, configs)

    assert unbudgeted.count("rag") >= 0.45 * len(traffic)  # the popularity gate alone retrieves far more
    assert 0 < routed.count("rag") <= 0.25 * len(traffic)
    decisions = [seen.decision(c["run_id"]) for c in configs]
    assert [d.retrieve for d in decisions] == [answer == "rag" for answer in routed]
    assert all(d.gate == "budget" for d in decisions)
    assert decisions[-1].details["budget"]["window_rate"] == routed.count("rag") / len(traffic)


def test_a_cascade_asks_the_chat_model_only_inside_its_band(knn_gate):
    chat = scripted("William Shakespeare. certain")
    cascade = CascadeGate(
        knn_gate, VerbalizedGate(LangChainChatModel(chat), judge=False, top_logprobs=0), band=(0.5, 1.0)
    )
    router, events = _router(cascade), _CustomEvents()

    assert router.invoke(KNOWN_Q, {"callbacks": [events]}) == "direct"
    assert events.names == [DECISION_EVENT]  # outside the band: no LLM call

    events.names.clear()
    seen = GateFeedback(cascade)
    config = {"callbacks": [events, seen], "run_id": uuid.uuid4()}
    # escalated; the model is sure of its draft, which is the answer (no second LLM call)
    assert router.invoke(UNKNOWN_Q, config) == "William Shakespeare"
    assert events.names == [LLM_CALL_EVENT, DECISION_EVENT]
    decision = seen.decision(config["run_id"])
    assert decision.details["stage"] == "costly" and decision.llm_calls == 1
    assert decision.draft_answer == "William Shakespeare"
