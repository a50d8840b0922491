"""How outcome records are judged in a report, and whose answers they hold."""

from __future__ import annotations

import dataclasses

import numpy as np

from adaptive_gates.evaluation.judging import (
    graded_outcomes,
    judged_by,
    model_mismatch,
    records_model,
    without_gold,
)
from adaptive_gates.gates.base.fitted_on import FittedOn
from adaptive_gates.records.selfknowledge import agreement_records, outcome_scores


def test_gold_answers_judge_when_every_record_has_some(outcome_records):
    records = outcome_records[:50]
    assert judged_by(records) == "gold" and without_gold(records) == 0
    stripped = [dataclasses.replace(r, answers=[]) if i % 5 == 0 else r for i, r in enumerate(records)]
    assert judged_by(stripped) == "agreement" and without_gold(stripped) == 10


def test_graded_outcomes_follow_the_labels(outcome_records):
    records = outcome_records[:50]
    a, b = graded_outcomes(records, "contains", "gold")
    np.testing.assert_array_equal((a, b), outcome_scores(records, "contains"))
    a, b = graded_outcomes(records, "contains", "agreement")
    np.testing.assert_array_equal((a, b), outcome_scores(agreement_records(records), "contains"))
    assert np.all(b == 1.0)  # the answer over passages is its own reference


def test_records_name_their_model(outcome_records):
    records = outcome_records[:5]
    assert records_model(records) == "meta-llama/Llama-3.1-8B-Instruct"
    other = dataclasses.replace(records[0], extra={"llm": "Qwen/Qwen2.5-7B-Instruct"})
    assert records_model([*records, other]) == "Qwen/Qwen2.5-7B-Instruct + meta-llama/Llama-3.1-8B-Instruct"
    assert records_model([dataclasses.replace(r, extra={}) for r in records]) is None


def test_a_gate_judged_on_another_models_answers_is_flagged(outcome_records):
    records = outcome_records[:20]
    fitted = FittedOn.from_records(records, "contains", "gold")
    assert model_mismatch(fitted, records) is None
    assert model_mismatch(None, records) is None
    other = [dataclasses.replace(r, extra={"llm": "Qwen/Qwen2.5-7B-Instruct"}) for r in records]
    mismatch = model_mismatch(fitted, other)
    assert mismatch["fitted_on"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert mismatch["judged_on"] == "Qwen/Qwen2.5-7B-Instruct"
    assert "fit it on this model's outcomes" in mismatch["message"]
    assert model_mismatch(fitted, [dataclasses.replace(r, extra={}) for r in records]) is None
