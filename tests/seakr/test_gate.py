"""SeaKR's gate: retrieve when the greedy answer is empty or U exceeds δ."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from adaptive_gates.answering.prompts import fill
from adaptive_gates.errors import BackendError, GateLoadError, NotFittedError
from adaptive_gates.seakr.gate import DEFAULT_STEP_TOKENS, SeaKRGate
from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?"]
SMALL = {"k": 2, "max_new_tokens": 6}


@pytest.fixture(scope="module")
def gate(lm, one_torch_thread):
    return SeaKRGate(lm, uncertainty=SMALL, step_tokens=6)


@pytest.fixture(scope="module")
def scores(gate):
    return gate.score(QUESTIONS)


def test_without_a_threshold_it_refuses_to_decide(gate):
    assert gate.is_fitted
    with pytest.raises(NotFittedError, match=r"SeaKRGate has no threshold"):
        _ = gate.threshold_
    with pytest.raises(NotFittedError):
        gate.decide(QUESTIONS[0])


def test_scores_are_u_and_decisions_compare_them_with_delta(gate, scores):
    assert scores.shape == (2,) and np.all(np.isfinite(scores))
    gate.set_params(threshold=float(np.mean(scores)))
    try:
        decisions = gate.decide_batch(QUESTIONS)
    finally:
        gate.set_params(threshold=None)
    for d, u in zip(decisions, scores):
        assert d.error is None
        assert d.score == pytest.approx(u)
        assert d.retrieve == (u > d.threshold)
        assert d.details["pseudo_step"]
        assert d.details["uncertainty"] == pytest.approx(u)
        assert d.details["n_samples"] >= 1 and len(d.details["samples"]) <= 3


def test_calibration_sets_delta_without_labels(gate, scores):
    with pytest.warns(UserWarning):  # two questions are too few to trust
        gate.calibrate_scores(scores, target_rate=0.5)
    try:
        assert gate.threshold_ == pytest.approx(float(np.mean(np.sort(scores))))
    finally:
        gate.reset_threshold()


def test_an_empty_greedy_step_falls_back_to_retrieval(lm, gate, one_torch_thread):
    prompt = fill(gate.prompt_template, question=QUESTIONS[0])
    first = lm.generate(prompt, max_new_tokens=6, stop=list(gate.stop))[0].text.strip()[0]
    empty = SeaKRGate(lm, uncertainty=SMALL, step_tokens=6, stop=[first], threshold=1e9)
    decision = empty.decide(QUESTIONS[0])
    assert decision.is_fallback and decision.retrieve is True
    assert decision.error.startswith("empty greedy step")
    assert decision.details == {"pseudo_step": ""}
    with pytest.raises(BackendError):
        empty.score([QUESTIONS[0]])
    direct = SeaKRGate(lm, uncertainty=SMALL, step_tokens=6, stop=[first], threshold=1e9, fallback_retrieve=False)
    assert direct.decide(QUESTIONS[0]).retrieve is False


def test_settings_are_checked_when_built(lm):
    estimator = SelfAwareUncertainty(lm, k=2)
    with pytest.raises(ValueError, match=r"not both"):
        SeaKRGate(lm, uncertainty=estimator)
    assert SeaKRGate(uncertainty=estimator).estimator is estimator
    with pytest.raises(ValueError):
        SeaKRGate(lm, uncertainty={"k": 0})
    with pytest.raises(ValueError):
        SeaKRGate(lm, prompt_template="no slot here")
    with pytest.raises(ValueError):
        SeaKRGate(lm, stop=[""])
    with pytest.raises((TypeError, ValueError)):
        SeaKRGate(lm, step_tokens=0)
    assert SeaKRGate(lm).step_tokens == DEFAULT_STEP_TOKENS


def test_saved_with_its_delta_and_model(gate, lm, tmp_path):
    gate.set_params(threshold=-3.5)
    try:
        path = gate.save(tmp_path / "seakr")
    finally:
        gate.set_params(threshold=None)
    config = json.loads((path / "config.json").read_text())
    assert config["state"]["model_id"] == lm.model_id
    assert config["params"]["uncertainty"]["k"] == 2
    loaded = SeaKRGate.load(path, lm=lm)
    assert loaded.threshold_ == -3.5
    assert loaded.estimator.k == 2 and loaded.estimator.max_new_tokens == 6
    assert not math.isnan(loaded.threshold_)


def test_a_gate_saved_with_another_model_is_refused(gate, lm, tmp_path):
    gate.set_params(threshold=-3.5)
    try:
        path = gate.save(tmp_path / "seakr")
    finally:
        gate.set_params(threshold=None)
    with pytest.raises(GateLoadError, match=r"state.model_id"):
        SeaKRGate(lm)._load_state(path, {"model_id": "someone/another-model"})
