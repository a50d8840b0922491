"""Condensing a follow-up with the embedded SmolLM2, live. What it writes is up to the
model; what must hold whatever it writes: the gate judges exactly the condensed text,
or the windowed question when the model gave no text."""

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from langchain_adaptive_gates import GateRunnable, condense_question_chain

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HISTORY = [HumanMessage("Who wrote Hamlet?"), AIMessage("William Shakespeare wrote Hamlet.")]
FOLLOW_UP = "And when did he die?"
WINDOWED = "Who wrote Hamlet?\nWilliam Shakespeare wrote Hamlet.\nAnd when did he die?"


def _recording_condenser(llm):
    written = []

    def record(text):
        written.append(text)
        return text

    return condense_question_chain(llm) | RunnableLambda(record), written


def _check(decision, written):
    assert len(written) == 1 and isinstance(written[0], str)
    if written[0].strip():
        assert decision.question == written[0].strip()
        assert "condense_error" not in decision.details
    else:
        assert decision.question == WINDOWED and "no text" in decision.details["condense_error"]
    assert decision.details["neighbours"]  # the gate scored that text against its memory


def test_live_condensed_follow_up_is_what_the_gate_saw(knn_gate, chat_llm):
    condense, written = _recording_condenser(chat_llm)
    gate = GateRunnable(knn_gate, history_window=2, condense=condense)
    _check(gate.invoke([*HISTORY, HumanMessage(FOLLOW_UP)]), written)

    condense, written = _recording_condenser(chat_llm)
    gate = GateRunnable(knn_gate, history_window=2, condense=condense)
    _check(asyncio.run(gate.ainvoke({"question": FOLLOW_UP, "chat_history": HISTORY})), written)


def test_live_condenser_is_not_asked_without_history(knn_gate, chat_llm):
    condense, written = _recording_condenser(chat_llm)
    decision = GateRunnable(knn_gate, history_window=2, condense=condense).invoke(FOLLOW_UP)
    assert written == [] and decision.question == FOLLOW_UP
