import math
from typing import get_args

import pytest

from adaptive_gates import GateDecision, SKRKnnGate
from langchain_adaptive_gates import CONTROL_KEYS, GateRunnable, RequestControl, control_specs


def _decision(score, threshold=0.5, draft=None, error=None):
    return GateDecision(
        retrieve=score > threshold if error is None else True,
        score=score,
        threshold=threshold,
        gate="g",
        draft_answer=draft,
        error=error,
    )


def test_control_reads_configurable():
    control = RequestControl.from_config(
        {"configurable": {"gate_threshold": 0.8, "gate_retrieval": "never", "gate_name": "verbalized"}}
    )
    assert control == RequestControl(0.8, "never", "verbalized")
    assert RequestControl.from_config(None) == RequestControl()


@pytest.mark.parametrize(
    "configurable, key",
    [
        ({"gate_threshold": "high"}, "gate_threshold"),
        ({"gate_threshold": math.nan}, "gate_threshold"),
        ({"gate_retrieval": "sometimes"}, "gate_retrieval"),
        ({"gate_name": 3}, "gate_name"),
    ],
)
def test_bad_control_names_the_key(configurable, key):
    with pytest.raises(ValueError, match=key):
        RequestControl.from_config({"configurable": configurable})


def test_threshold_override_retakes_the_verdict(knn_gate):
    control = RequestControl(threshold=0.9)
    relaxed = control.apply_threshold(_decision(0.7), knn_gate)
    assert relaxed.retrieve is False and relaxed.threshold == 0.9 and relaxed.details["gate_threshold"] == 0.5
    stricter = RequestControl(threshold=0.1).apply_threshold(_decision(0.3, draft="Paris"), knn_gate)
    assert stricter.retrieve is True and stricter.draft_answer is None


def test_threshold_override_keeps_a_fallback(knn_gate):
    fallback = _decision(math.nan, error="backend error")
    assert RequestControl(threshold=10.0).apply_threshold(fallback, knn_gate).retrieve is True


def test_a_request_threshold_keeps_the_gates_tie_rule(core_embedder):
    """Under the authors' majority vote a tied vote retrieves when the classes are even;
    a per-request threshold at the tie decides by that rule, not by score > threshold."""
    questions = [
        "Who wrote Hamlet?",
        "What is the capital of France?",
        "Who won the village election last year?",
        "What did yesterday's report conclude?",
    ]
    with pytest.warns(UserWarning, match="k=4 is used"):  # every question: all four neighbours, a 2-2 tie
        gate = SKRKnnGate(core_embedder, k=4, vote="majority").fit(questions, [0, 0, 1, 1])
    runnable = GateRunnable(gate)
    own = runnable.invoke("Who painted the Mona Lisa?")
    assert own.score == 0.5 and own.threshold == 0.5 and own.retrieve is True  # the tie rule
    at_tie = runnable.invoke("Who painted the Mona Lisa?", config={"configurable": {"gate_threshold": 0.5}})
    assert at_tie.retrieve is True and at_tie.details["gate_threshold"] == 0.5
    above = runnable.invoke("Who painted the Mona Lisa?", config={"configurable": {"gate_threshold": 0.6}})
    assert above.retrieve is False


def test_forced_decisions_say_so():
    decision = RequestControl(retrieval="always").forced("q", "skr-knn")
    assert decision.retrieve is True and decision.details == {"forced": "always"} and decision.gate == "skr-knn"
    assert RequestControl(retrieval="never").forced("q", "skr-knn").retrieve is False


def test_a_target_rate_is_read_and_checked():
    assert RequestControl.from_config({"configurable": {"gate_target_rate": 0.2}}).target_rate == 0.2
    for bad in (1.5, -0.1, "a lot", True):
        with pytest.raises(ValueError, match="gate_target_rate"):
            RequestControl.from_config({"configurable": {"gate_target_rate": bad}})
    with pytest.raises(ValueError, match="not both"):
        RequestControl.from_config({"configurable": {"gate_target_rate": 0.2, "gate_threshold": 0.5}})


def test_a_misspelt_gate_key_is_refused_with_a_suggestion():
    with pytest.raises(ValueError, match=r"unknown configurable key 'gate_treshold'; did you mean 'gate_threshold'\?"):
        RequestControl.from_config({"configurable": {"gate_treshold": 0.3}})
    with pytest.raises(ValueError, match=r"'gate_colour' \(the gate's keys: gate_threshold, gate_retrieval, gate_name"):
        RequestControl.from_config({"configurable": {"gate_colour": "red"}})


def test_keys_of_other_runnables_pass():
    configurable = {"thread_id": "t-1", "temperature": 0.2, "search_kwargs": {"k": 2}, "gate_retrieval": "never"}
    assert RequestControl.from_config({"configurable": configurable}) == RequestControl(retrieval="never")


def test_control_specs_declare_each_key():
    specs = {spec.id: spec for spec in control_specs(["verbalized", "skr-knn"], "skr-knn")}
    assert tuple(specs) == CONTROL_KEYS
    assert get_args(specs["gate_name"].annotation) == ("skr-knn", "verbalized")
    assert get_args(specs["gate_retrieval"].annotation) == ("auto", "always", "never")
    assert {key: spec.default for key, spec in specs.items()} == {
        "gate_threshold": None,
        "gate_retrieval": "auto",
        "gate_name": "skr-knn",
        "gate_target_rate": None,
    }
    assert all(spec.name and spec.description for spec in specs.values())
    with pytest.raises(ValueError, match="default gate 'thrust' is not one of"):
        control_specs(["skr-knn"], "thrust")
