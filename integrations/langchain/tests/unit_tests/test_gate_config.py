"""GateRunnable's configurable keys as LangChain declares them: config specs, the config
schema, ``with_config``, chains, and the refusal of a misspelt ``gate_`` key; over a
real SKR-kNN gate (the embedded MiniLM) and real LangChain runnables."""

import asyncio
from typing import get_args

import pytest
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import ConfigurableField, RunnableLambda, RunnableParallel

from adaptive_gates import VerbalizedGate
from langchain_adaptive_gates import CONTROL_KEYS, GateRunnable, LangChainChatModel

from .chat_doubles import scripted

KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"
MISSPELT = {"configurable": {"gate_treshold": 1.0}}


@pytest.fixture
def gate(knn_gate):
    verbalized = VerbalizedGate(LangChainChatModel(scripted("Shakespeare. certain")), judge=False, top_logprobs=0)
    return GateRunnable(knn_gate, alternatives={"verbalized": verbalized})


def test_config_specs_list_each_control_key(gate):
    specs = {spec.id: spec for spec in gate.config_specs}
    assert sorted(specs) == sorted(CONTROL_KEYS)
    assert get_args(specs["gate_name"].annotation) == ("skr-knn", "verbalized")
    assert specs["gate_name"].default == "skr-knn" and specs["gate_retrieval"].default == "auto"
    assert specs["gate_threshold"].default is None and specs["gate_target_rate"].default is None


def test_config_schema_shows_the_keys_as_json(gate):
    schema = gate.config_schema().model_json_schema()
    fields = schema["$defs"]["Configurable"]["properties"]
    assert sorted(fields) == sorted(CONTROL_KEYS)
    assert fields["gate_name"]["enum"] == ["skr-knn", "verbalized"] and fields["gate_name"]["default"] == "skr-knn"
    assert fields["gate_retrieval"]["enum"] == ["auto", "always", "never"]
    rate = next(t for t in fields["gate_target_rate"]["anyOf"] if t.get("type") == "number")
    assert (rate["minimum"], rate["maximum"]) == (0.0, 1.0)
    assert all(field["description"] and field["title"] for field in fields.values())
    # what the schema declares is what the gate honours
    config = gate.config_schema().model_validate({"configurable": {"gate_name": "verbalized"}}).model_dump()
    assert gate.invoke("Who wrote Macbeth?", config).draft_answer == "Shakespeare"


def test_config_specs_flow_through_chains(gate, knn_gate):
    chain = PromptTemplate.from_template("{question}") | gate
    parallel = RunnableParallel(decision=gate, echo=RunnableLambda(lambda q: q))
    for runnable in (chain, parallel):
        assert sorted(spec.id for spec in runnable.config_specs) == sorted(CONTROL_KEYS)
        assert sorted(runnable.config_schema().model_json_schema()["$defs"]["Configurable"]["properties"]) == sorted(
            CONTROL_KEYS
        )
    assert chain.invoke({"question": UNKNOWN_Q}).retrieve is True
    assert chain.invoke({"question": UNKNOWN_Q}, {"configurable": {"gate_retrieval": "never"}}).retrieve is False
    # two gates over the same gates declare the same keys; over other gates LangChain
    # refuses the conflict, as one gate_name cannot pick from both
    assert len(RunnableParallel(a=gate, b=GateRunnable(knn_gate, alternatives=gate.alternatives)).config_specs) == 4
    with pytest.raises(ValueError, match="conflicting config specs"):
        _ = RunnableParallel(a=gate, b=GateRunnable(knn_gate)).config_specs


def test_with_config_controls_the_gate_as_langchains_fields_do(gate):
    forced = gate.with_config(configurable={"gate_retrieval": "always"})
    assert forced.invoke(KNOWN_Q).details == {"forced": "always"}
    assert asyncio.run(forced.ainvoke(KNOWN_Q)).retrieve is True
    chain = (RunnableLambda(lambda q: q) | gate).with_config(configurable={"gate_threshold": 1.0})
    relaxed = chain.invoke(UNKNOWN_Q)  # k=1 votes 0 or 1: at 1 the unknown question goes direct
    assert relaxed.retrieve is False and relaxed.threshold == 1.0


def test_a_misspelt_gate_key_raises_in_every_call(gate):
    says = "unknown configurable key 'gate_treshold'; did you mean 'gate_threshold'"
    with pytest.raises(ValueError, match=says):
        gate.invoke(KNOWN_Q, MISSPELT)
    with pytest.raises(ValueError, match=says):
        asyncio.run(gate.ainvoke(KNOWN_Q, MISSPELT))
    with pytest.raises(ValueError, match=says):
        gate.batch([KNOWN_Q, UNKNOWN_Q], [{}, MISSPELT])
    with pytest.raises(ValueError, match=says):
        asyncio.run(gate.abatch([KNOWN_Q], MISSPELT))
    with pytest.raises(ValueError, match=says):
        gate.with_config(MISSPELT).invoke(KNOWN_Q)
    good, bad = gate.batch([UNKNOWN_Q, UNKNOWN_Q], [{}, MISSPELT], return_exceptions=True)
    assert good.retrieve is True and isinstance(bad, ValueError)


def test_a_key_of_another_runnable_passes(gate):
    plain = gate.invoke(UNKNOWN_Q)
    other = gate.invoke(UNKNOWN_Q, {"configurable": {"thread_id": "t-1", "temperature": 0.0}})
    assert (other.retrieve, other.score, other.threshold) == (plain.retrieve, plain.score, plain.threshold)


def test_the_condensers_keys_are_declared_and_reach_it(knn_gate):
    template = PromptTemplate.from_template("{question}").configurable_fields(
        template=ConfigurableField(id="condense_template", name="Condense template")
    )
    condense = template | RunnableLambda(lambda p: p.to_string())
    gate = GateRunnable(knn_gate, history_window=1, condense=condense)
    assert "condense_template" in {spec.id for spec in gate.config_specs}
    conversation = [("human", "Who wrote Hamlet?"), ("ai", "Shakespeare."), ("human", "When did he die?")]
    config = {"configurable": {"condense_template": "When did Shakespeare die? ({question})"}}
    assert gate.invoke(conversation, config).question == "When did Shakespeare die? (When did he die?)"
