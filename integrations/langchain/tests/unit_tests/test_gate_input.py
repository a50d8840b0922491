"""What GateRunnable takes and gives: its input and output schemas, and one rule for
bad input (the gate's recorded fallback decision, never an exception), over a real
SKR-kNN gate (the embedded MiniLM) in real LangChain calls."""

import asyncio
import logging
import math

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from pydantic import ValidationError

from adaptive_gates import DecisionListener, GateDecision, SKRKnnGate
from langchain_adaptive_gates import DECISION_EVENT, GateRunnable

from ..conftest import KNOWN, UNKNOWN
from ..input_forms import NOT_INPUTS, question_forms

KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"

#: Inputs with no question the gate can judge, and what the fallback's error says.
BAD_INPUTS = [
    pytest.param(
        {"query": KNOWN_Q},
        "invalid input: the input dict has no 'question' or 'input' key (keys: ['query'])",
        id="no-key",
    ),
    pytest.param(
        [SystemMessage("Be brief."), AIMessage("Hello.")],
        "invalid input: the message list has no human message to take the question from",
        id="no-human-message",
    ),
    pytest.param([42], "invalid input: the input list is not a message list", id="not-messages"),
    pytest.param({"question": 42}, "invalid question: a question must be a str, got int", id="non-string"),
    pytest.param("", "invalid question: a question must not be empty or whitespace", id="empty"),
    pytest.param(None, "invalid question: a question must be a str, got NoneType", id="none"),
    pytest.param(42, "invalid question: a question must be a str, got int", id="42"),
]


@pytest.fixture
def gate(knn_gate):
    return GateRunnable(knn_gate)


def _is_fallback_saying(decision, error, gate):
    return (
        isinstance(decision, GateDecision)
        and decision.error is not None
        and decision.error.startswith(error)
        and decision.retrieve is gate.fallback_retrieve
        and math.isnan(decision.score)
        and decision.threshold == gate.threshold_
        and decision.gate == gate.name
    )


# ----------------------------------------------------------------- schemas
def test_the_input_schema_describes_every_form(gate):
    schema = gate.get_input_jsonschema()
    kinds = schema["anyOf"]
    assert kinds[0] == {"type": "string"}
    item = kinds[1]["items"]["anyOf"]
    assert kinds[1]["type"] == "array" and {"$ref": "#/$defs/HumanMessage"} in item[0]["oneOf"]
    assert item[1] == {"$ref": "#/$defs/RoleMessage"} and item[2]["prefixItems"] == [{"type": "string"}] * 2
    assert {"$ref": "#/$defs/ChatPromptValue"} in kinds and {"$ref": "#/$defs/StringPromptValue"} in kinds
    keyed = schema["$defs"]["GateInputDict"]
    assert keyed["required"] == ["question"] and sorted(keyed["properties"]) == ["chat_history", "question"]
    assert "last human turn" in keyed["properties"]["question"]["description"]
    assert schema["$defs"]["GateInputDictByInput"]["required"] == ["input"]


@pytest.mark.parametrize("form", list(question_forms(KNOWN_Q)))
def test_every_form_the_gate_reads_validates_and_is_decided_alike(gate, form):
    value = question_forms(UNKNOWN_Q)[form]
    gate.get_input_schema().model_validate(value)
    decision = gate.invoke(value)
    assert decision.error is None and decision.question.endswith(UNKNOWN_Q) and decision.retrieve is True


@pytest.mark.parametrize("value", NOT_INPUTS.values(), ids=list(NOT_INPUTS))
def test_a_value_in_no_form_is_a_validation_error(gate, value):
    with pytest.raises(ValidationError):
        gate.get_input_schema().model_validate(value)


def test_input_is_the_question_only_without_the_runnables_key(gate):
    assert gate.invoke({"input": UNKNOWN_Q}).retrieve is True
    both = gate.invoke({"question": KNOWN_Q, "input": UNKNOWN_Q})
    assert both.question == KNOWN_Q and both.retrieve is False


def test_the_input_schema_follows_input_key(knn_gate):
    gate = GateRunnable(knn_gate, input_key="query", history_key="history")
    keyed = gate.get_input_schema().model_json_schema()["$defs"]["GateInputDict"]
    assert keyed["required"] == ["query"] and sorted(keyed["properties"]) == ["history", "query"]
    assert gate.InputType == GateRunnable(knn_gate, input_key="query", history_key="history").InputType
    assert gate.InputType != GateRunnable(knn_gate).InputType


def test_the_output_schema_is_the_decisions_as_json_carries_them(gate):
    assert gate.OutputType is GateDecision
    forced = gate.invoke(KNOWN_Q, {"configurable": {"gate_retrieval": "always"}}).to_dict()
    assert forced["score"] is None  # JSON has no NaN
    for decision in (forced, gate.invoke(KNOWN_Q).to_dict()):
        assert gate.get_output_schema().model_validate(decision).model_dump() == decision
    assert gate.get_output_jsonschema()["properties"]["score"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    assert math.isnan(gate.get_output_schema().model_validate(GateDecision.forced(KNOWN_Q, "skr-knn", "never")).score)
    decision = gate.get_output_jsonschema()
    fields = [
        "retrieve",
        "score",
        "threshold",
        "gate",
        "latency_ms",
        "question",
        "details",
        "draft_answer",
        "error",
        "llm_calls",
        "answer_without_retrieval",
        "passages",
    ]
    assert list(decision["properties"]) == fields
    assert decision["required"] == ["retrieve", "score", "threshold", "gate"]
    assert decision["properties"]["retrieve"]["type"] == "boolean"
    assert "error: why a fallback decision was taken" in decision["description"]
    assert gate.get_output_schema().model_validate(gate.invoke(UNKNOWN_Q)).retrieve is True


# ----------------------------------------------------------------- one bad-input rule
@pytest.mark.parametrize("value, error", BAD_INPUTS)
def test_bad_input_gives_the_gates_recorded_fallback(gate, knn_gate, value, error, caplog):
    with caplog.at_level(logging.WARNING):
        decision = gate.invoke(value)
    assert _is_fallback_saying(decision, error, knn_gate), decision
    assert any(r.levelno == logging.WARNING and error in r.getMessage() for r in caplog.records)
    assert _is_fallback_saying(asyncio.run(gate.ainvoke(value)), error, knn_gate)


def test_a_batch_mixing_bad_and_good_inputs_decides_the_good_ones(gate, knn_gate):
    bad = [p.values[0] for p in BAD_INPUTS]
    inputs = [KNOWN_Q, *bad, {"question": UNKNOWN_Q}]
    expected = knn_gate.decide_batch([KNOWN_Q, UNKNOWN_Q])
    for decisions in (gate.batch(inputs), asyncio.run(gate.abatch(inputs))):
        good = [decisions[0], decisions[-1]]
        assert [(d.retrieve, d.score, d.error) for d in good] == [(d.retrieve, d.score, None) for d in expected]
        assert all(_is_fallback_saying(d, p.values[1], knn_gate) for d, p in zip(decisions[1:-1], BAD_INPUTS))


def test_the_fallback_is_the_gates_own(core_embedder):
    """A gate set to answer directly when it cannot judge gives that verdict for an
    input without a question too, and its listeners hear of it."""

    class Heard(DecisionListener):
        def __init__(self):
            self.decisions = []

        def on_decision(self, decision):
            self.decisions.append(decision)

    knn = SKRKnnGate(core_embedder, k=1, fallback_retrieve=False)
    knn.fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))
    heard = Heard()
    knn.add_listener(heard)
    decisions = GateRunnable(knn).batch([{"query": KNOWN_Q}, None])
    assert [d.retrieve for d in decisions] == [False, False] and all(d.is_fallback for d in decisions)
    assert heard.decisions == decisions


def test_the_fallback_is_a_decision_event(gate):
    async def events():
        return [e async for e in (RunnableLambda(lambda x: x) | gate).astream_events({"q": 1}, version="v2")]

    custom = [e for e in asyncio.run(events()) if e["event"] == "on_custom_event"]
    assert [e["name"] for e in custom] == [DECISION_EVENT]
    assert custom[0]["data"]["retrieve"] is True and "no 'question' or 'input' key" in custom[0]["data"]["error"]


def test_history_does_not_stand_in_for_an_empty_question(knn_gate):
    gate = GateRunnable(knn_gate, history_window=2)
    decision = gate.invoke([HumanMessage("Who wrote Hamlet?"), AIMessage("Shakespeare."), HumanMessage("  ")])
    assert decision.is_fallback and "must not be empty" in decision.error


def test_a_forced_request_needs_no_question(gate):
    decision = gate.invoke({"query": KNOWN_Q}, {"configurable": {"gate_retrieval": "never"}})
    assert decision.retrieve is False and decision.details == {"forced": "never"} and decision.error is None


def test_a_bad_control_still_raises_whatever_the_input(gate):
    with pytest.raises(ValueError, match="'gate_threshold' must be a finite number"):
        gate.invoke({"query": KNOWN_Q}, {"configurable": {"gate_threshold": "high"}})


def test_input_key_names_the_dicts_question(knn_gate):
    gate = GateRunnable(knn_gate, input_key="query")
    assert gate.invoke({"query": UNKNOWN_Q}).retrieve is True
    assert gate.invoke({"query": KNOWN_Q, "chat_history": [("human", "Hi")]}).retrieve is False
    missing = gate.invoke({"question": KNOWN_Q})
    assert missing.is_fallback and "no 'query' or 'input' key (keys: ['question'])" in missing.error
