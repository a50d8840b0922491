"""Each request a real gate sends the embedded SmolLM2 is a custom event of the run."""

import asyncio

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda

from adaptive_gates import VerbalizedGate
from adaptive_gates.models import LocalChatModel
from langchain_adaptive_gates import DECISION_EVENT, LLM_CALL_EVENT, GateRunnable, gated_router

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?"]


@pytest.fixture(scope="module")
def verbalized():
    """The verbalized gate on the embedded SmolLM2: one short request per question."""
    return VerbalizedGate(LocalChatModel(), max_tokens=8, judge=False, top_logprobs=0)


def _check_call(payload, question, decision):
    assert payload["gate"] == "verbalized" and payload["purpose"] == "answer+certainty"
    assert payload["model_id"] == LocalChatModel().model_id and payload["error"] is None
    assert question in payload["messages"][-1]["content"]
    assert payload["reply"] == decision["details"]["reply"]  # the very reply the gate judged


def test_astream_events_carry_the_llm_call_before_the_decision(verbalized):
    router = gated_router(
        verbalized, direct=RunnableLambda(lambda q: "direct"), retrieval=RunnableLambda(lambda q: "rag")
    )

    async def events():
        return [e async for e in router.astream_events(QUESTIONS[0], version="v2") if e["event"] == "on_custom_event"]

    custom = asyncio.run(events())
    assert [e["name"] for e in custom] == [LLM_CALL_EVENT, DECISION_EVENT]
    _check_call(custom[0]["data"], QUESTIONS[0], custom[1]["data"])


class _Custom(BaseCallbackHandler):
    """Records each run's input and the custom events dispatched in it."""

    def __init__(self):
        self.inputs, self.events = {}, []

    def on_chain_start(self, serialized, inputs, *, run_id, **kwargs):
        self.inputs[run_id] = inputs

    def on_custom_event(self, name, data, *, run_id, **kwargs):
        self.events.append((name, data, run_id))


@pytest.mark.parametrize("mode", ["batch", "abatch"])
def test_each_run_of_a_batch_gets_the_call_about_its_question(verbalized, mode):
    gate = GateRunnable(verbalized)
    handler = _Custom()
    config = {"callbacks": [handler]}
    if mode == "batch":
        gate.batch(QUESTIONS, config)
    else:
        asyncio.run(gate.abatch(QUESTIONS, config))
    for question in QUESTIONS:
        run = next(r for r, x in handler.inputs.items() if x == question)
        names = [(name, data) for name, data, r in handler.events if r == run]
        assert [name for name, _ in names] == [LLM_CALL_EVENT, DECISION_EVENT]
        _check_call(names[0][1], question, names[1][1])
