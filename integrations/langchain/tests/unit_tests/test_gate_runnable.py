"""GateRunnable over a real SKR-kNN gate (the embedded MiniLM), in real LCEL chains."""

import asyncio

import numpy as np
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableBranch, RunnableLambda

from adaptive_gates import GateDecision, NotFittedError, SKRKnnGate, VerbalizedGate
from langchain_adaptive_gates import DECISION_EVENT, GateRunnable, LangChainChatModel

from .chat_doubles import UnreachableChatModel, scripted

KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"


@pytest.fixture
def gate(knn_gate):
    return GateRunnable(knn_gate)


def test_string_dict_and_messages_give_the_same_decision(gate):
    by_text = gate.invoke(KNOWN_Q)
    assert isinstance(by_text, GateDecision) and by_text.retrieve is False and by_text.gate == "skr-knn"
    assert gate.invoke({"question": KNOWN_Q}).score == by_text.score
    assert gate.invoke([HumanMessage(KNOWN_Q)]).score == by_text.score
    assert GateRunnable(gate.gate, input_key="input").invoke({"input": UNKNOWN_Q}).retrieve is True


def test_batch_decides_in_one_gate_call(gate, monkeypatch):
    calls = []
    real = gate.gate.decide_batch
    monkeypatch.setattr(gate.gate, "decide_batch", lambda qs: calls.append(list(qs)) or real(qs))
    decisions = gate.batch([KNOWN_Q, UNKNOWN_Q, {"question": KNOWN_Q}])
    assert [d.retrieve for d in decisions] == [False, True, False]
    assert calls == [[KNOWN_Q, UNKNOWN_Q, KNOWN_Q]]


def test_abatch_and_ainvoke_match_sync(gate):
    sync = gate.batch([KNOWN_Q, UNKNOWN_Q])
    async_ = asyncio.run(gate.abatch([KNOWN_Q, UNKNOWN_Q]))
    assert [d.retrieve for d in async_] == [d.retrieve for d in sync]
    assert asyncio.run(gate.ainvoke(UNKNOWN_Q)).score == sync[1].score


def test_condition_of_runnable_branch(gate):
    branch = RunnableBranch((gate.as_condition(), RunnableLambda(lambda q: "rag")), RunnableLambda(lambda q: "direct"))
    assert branch.batch([KNOWN_Q, UNKNOWN_Q]) == ["direct", "rag"]


def test_decision_is_a_custom_event(gate):
    async def events():
        return [e async for e in (RunnableLambda(lambda q: q) | gate).astream_events(UNKNOWN_Q, version="v2")]

    custom = [e for e in asyncio.run(events()) if e["event"] == "on_custom_event"]
    assert len(custom) == 1 and custom[0]["name"] == DECISION_EVENT
    assert custom[0]["data"]["retrieve"] is True and custom[0]["data"]["question"] == UNKNOWN_Q


def test_bad_input_is_that_inputs_fallback_only(gate):
    out = gate.batch([{"query": KNOWN_Q}, KNOWN_Q])
    assert out[0].is_fallback and out[0].retrieve is True and "no 'question' or 'input' key" in out[0].error
    assert out[1].retrieve is False and not out[1].is_fallback
    empty = gate.invoke("   ")
    assert empty.is_fallback and empty.retrieve is True and "invalid question" in empty.error


def test_config_overrides_per_request(gate, knn_gate):
    assert gate.invoke(UNKNOWN_Q, {"configurable": {"gate_retrieval": "never"}}).retrieve is False
    forced = gate.invoke(KNOWN_Q, {"configurable": {"gate_retrieval": "always"}})
    assert forced.retrieve is True and forced.details == {"forced": "always"}
    # k=1 votes 0 or 1: a threshold of 1 lets the unknown question through directly.
    relaxed = gate.invoke(UNKNOWN_Q, {"configurable": {"gate_threshold": 1.0}})
    assert relaxed.retrieve is False and relaxed.score == 1.0
    with pytest.raises(ValueError, match="no gate named 'thrust'"):
        gate.invoke(KNOWN_Q, {"configurable": {"gate_name": "thrust"}})


def test_a_target_rate_per_request_uses_the_gates_calibration(labelled_questions, core_embedder, knn_gate):
    from adaptive_gates import SKRKnnGate

    questions, labels = labelled_questions
    fit, calibration, test = questions[:150], questions[150:210], questions[210:330]
    gate = SKRKnnGate(core_embedder, k=10, weighting="similarity").fit(fit, labels[:150])
    gate.calibrate(calibration, target_rate=0.5)
    runnable = GateRunnable(gate)
    for rate in (0.1, 0.8):
        decisions = runnable.batch(test, {"configurable": {"gate_target_rate": rate}})
        assert {d.threshold for d in decisions} == {gate.threshold_at_rate(rate)}
        assert all(d.details["gate_target_rate"] == rate for d in decisions)
        assert abs(sum(d.retrieve for d in decisions) / len(test) - rate) <= 0.15, rate
    with pytest.raises(ValueError, match="not calibrated"):
        GateRunnable(knn_gate).invoke(KNOWN_Q, {"configurable": {"gate_target_rate": 0.3}})


def test_registered_gates_are_chosen_by_name(knn_gate):
    verbalized = VerbalizedGate(LangChainChatModel(scripted("Paris. certain")), judge=False, top_logprobs=0)
    gate = GateRunnable(knn_gate, alternatives={"verbalized": verbalized})
    picked = gate.invoke("What is the capital of France?", {"configurable": {"gate_name": "verbalized"}})
    assert picked.gate == "verbalized" and picked.retrieve is False and picked.draft_answer == "Paris"
    assert gate.invoke("What is the capital of France?").gate == "skr-knn"


def test_failing_chat_model_gives_the_recorded_fallback():
    llm = UnreachableChatModel()
    gate = GateRunnable(VerbalizedGate(LangChainChatModel(llm), judge=False))
    decision = gate.invoke(KNOWN_Q)
    assert decision.is_fallback and decision.retrieve is True
    assert "connection refused" in decision.error and llm.calls >= 1


def test_history_window_changes_the_decision(knn_gate):
    conversation = [
        HumanMessage("Who wrote Hamlet?"),
        AIMessage("William Shakespeare."),
        HumanMessage("And when did he die?"),
    ]
    alone = GateRunnable(knn_gate).invoke(conversation)
    with_history = GateRunnable(knn_gate, history_window=2).invoke(conversation)
    assert alone.question == "And when did he die?"
    assert with_history.question == "Who wrote Hamlet? And when did he die?"  # the reply is never judged
    assert with_history.details["neighbours"][0]["label"] == "known"
    assert (alone.retrieve, with_history.retrieve) == (True, False)


def test_condensed_follow_up_is_what_the_gate_judges(knn_gate):
    condense = RunnableLambda(lambda x: f"{x['question']} ({len(x['chat_history'])} turns)")
    gate = GateRunnable(knn_gate, history_window=1, condense=condense)
    decision = gate.invoke(
        {"question": "When did he die?", "chat_history": [("human", "Who wrote Hamlet?"), ("ai", "Shakespeare.")]}
    )
    assert decision.question == "When did he die? (1 turns)"


def test_failing_condenser_falls_back_to_the_window(knn_gate):
    def broken(_):
        raise TimeoutError("condenser timed out")

    gate = GateRunnable(knn_gate, history_window=2, condense=RunnableLambda(broken))
    decision = gate.invoke([("human", "Who wrote Hamlet?"), ("ai", "Shakespeare."), ("human", "When did he die?")])
    assert decision.question == "Who wrote Hamlet? When did he die?"
    assert "condenser timed out" in decision.details["condense_error"]


class _BuggyKnnGate(SKRKnnGate):
    """A custom gate with a bug in its own rule: deciding raises past the gate's guards."""

    name = "buggy-knn"

    def retrieves(self, scores, threshold=None):
        return np.asarray(scores) > self.tie_threshold  # never set: the bug


def test_an_unfitted_gate_raises_not_fitted_in_a_chain_as_in_every_door(core_embedder):
    chain = RunnableLambda(lambda q: q.strip()) | GateRunnable(SKRKnnGate(core_embedder, k=1))
    for call in (
        lambda: chain.invoke(KNOWN_Q),
        lambda: chain.batch([KNOWN_Q, UNKNOWN_Q]),
        lambda: asyncio.run(chain.ainvoke(KNOWN_Q)),
    ):
        with pytest.raises(NotFittedError, match="SKRKnnGate is not fitted"):
            call()


def test_a_gate_that_raises_gives_its_recorded_fallback_and_the_chain_goes_on(core_embedder):
    buggy = _BuggyKnnGate(core_embedder, k=1).fit([KNOWN_Q, UNKNOWN_Q], [0, 1])
    branch = RunnableBranch(
        (GateRunnable(buggy).as_condition(), RunnableLambda(lambda q: "rag")), RunnableLambda(lambda q: "direct")
    )
    assert branch.batch([KNOWN_Q, UNKNOWN_Q]) == ["rag", "rag"]
    for decision in (GateRunnable(buggy).invoke(KNOWN_Q), asyncio.run(GateRunnable(buggy).ainvoke(KNOWN_Q))):
        assert decision.is_fallback and decision.retrieve and decision.question == KNOWN_Q
        assert decision.error.startswith("the gate raised AttributeError") and "tie_threshold" in decision.error
    stays = _BuggyKnnGate(core_embedder, k=1, fallback_retrieve=False).fit([KNOWN_Q, UNKNOWN_Q], [0, 1])
    assert GateRunnable(stays).invoke(UNKNOWN_Q).retrieve is False
