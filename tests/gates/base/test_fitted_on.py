"""A fitted gate records what it learned from: the LLM whose outcomes it read (the
records' ``llm`` field), how many, graded how, and from where; it saves and loads with
the gate, and a malformed record of it is refused naming the field. Fitting with
``labels="agreement"`` needs no gold answer."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.errors import GateLoadError
from adaptive_gates.gates.base.fitted_on import FittedOn, same_model
from adaptive_gates.persistence.saved_format import with_checksums
from adaptive_gates.records.selfknowledge import agreement_records, label_outcomes, outcome_scores

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def records():
    return adarague_outcomes("nq")[:120]


def test_a_gate_fitted_on_outcomes_records_their_model_count_labels_and_sources(records, cached_embedder, tmp_path):
    gate = SKRKnnGate(embedder=cached_embedder, k=5).fit_outcomes(records, sources=["nq.train.jsonl"])
    fitted = gate.fitted_on_
    assert fitted is not None
    assert (fitted.model, fitted.records, fitted.labels, fitted.metric) == (LLAMA, 120, "gold", "contains")
    assert fitted.sources == ("nq.train.jsonl",)
    assert fitted.describe() == f"120 outcomes of {LLAMA} (gold labels, contains) from nq.train.jsonl"
    # the same questions give the same digest; other questions another
    other = SKRKnnGate(embedder=cached_embedder, k=5).fit_outcomes(adarague_outcomes("nq")[120:240])
    assert other.fitted_on_ is not None and other.fitted_on_.questions_sha256 != fitted.questions_sha256
    again = FittedOn.from_records(records, "contains", "gold")
    assert again.questions_sha256 == fitted.questions_sha256
    loaded = SKRKnnGate.load(gate.save(tmp_path / "g"), embedder=cached_embedder)
    assert loaded.fitted_on_ == fitted


def test_records_of_several_models_or_of_none_say_so(records, cached_embedder):
    mixed = [replace(r, extra={**r.extra, "llm": "my-model"}) if i % 2 else r for i, r in enumerate(records)]
    assert FittedOn.from_records(mixed, "contains", "gold").model == f"{LLAMA} + my-model"
    unnamed = [replace(r, extra={}) for r in records]
    assert FittedOn.from_records(unnamed, "contains", "gold").model is None
    # a gate fitted on labelled questions, not on outcomes, records nothing
    gate = SKRKnnGate(embedder=cached_embedder, k=1).fit(["Who wrote Hamlet?", "What is 2+2?"], [0, 1])
    assert gate.fitted_on_ is None


def test_same_model_compares_ids_without_their_organisation_or_case():
    assert same_model(LLAMA, "llama-3.1-8b-instruct") is True
    assert same_model(LLAMA, "HuggingFaceTB/SmolLM2-135M-Instruct") is False
    assert same_model(None, "x") is None and same_model(LLAMA, None) is None


def test_agreement_labels_grade_the_answer_without_retrieval_against_the_one_with_it(records):
    graded = agreement_records(records)
    a, b = outcome_scores(graded)
    agrees = np.array([r.pred_no_retrieval.strip().lower() == r.pred_one_retrieval.strip().lower() for r in records])
    assert np.all(a[agrees] == 1)  # the same answer both ways agrees
    assert np.all(b[[bool(r.pred_one_retrieval.strip()) for r in records]] == 1)
    # no gold answer is read: records without any fit the same
    no_gold = [replace(r, answers=[]) for r in records]
    assert label_outcomes(agreement_records(no_gold)).labels == label_outcomes(graded).labels


def test_a_gate_fits_on_plain_questions_with_agreement_labels(records, cached_embedder):
    no_gold = [replace(r, answers=[]) for r in records]
    gate = SKRKnnGate(embedder=cached_embedder, k=5).fit_outcomes(no_gold, labels="agreement")
    assert gate.fitted_on_ is not None and gate.fitted_on_.labels == "agreement"
    helped = label_outcomes(agreement_records(records)).counts[1]
    assert gate.memory_.counts[1] == helped > 0
    with pytest.raises(ValueError, match="labels must be one of"):
        SKRKnnGate(embedder=cached_embedder).fit_outcomes(records, labels="silver")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"labels": "silver"}, "fitted_on.labels"),
        ({"records": -1}, "fitted_on.records"),
        ({"model": 3}, "fitted_on.model"),
        ({"sources": [1]}, "fitted_on.sources"),
    ],
)
def test_a_saved_gate_with_a_malformed_fitted_on_is_refused_naming_the_field(
    records, cached_embedder, tmp_path, change, field
):
    path = SKRKnnGate(embedder=cached_embedder, k=5).fit_outcomes(records).save(tmp_path / "g")
    config = json.loads((path / "config.json").read_text())
    config["fitted_on"].update(change)
    (path / "config.json").write_text(json.dumps(with_checksums(config)))  # as if saved so
    with pytest.raises(GateLoadError, match=f"field '{field}'"):
        SKRKnnGate.load(path, embedder=cached_embedder)
