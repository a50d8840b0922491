"""SeaKR's test of one context: the greedy next step and U of the context."""

from __future__ import annotations

import math

import pytest

from adaptive_gates.models.lm.generation import Generation
from adaptive_gates.seakr.step import PseudoStep, pseudo_step
from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty, UncertaintyEstimate

PROMPT = "What is the capital of France? Answer in a few words."


@pytest.fixture(scope="module")
def estimator(lm):
    return SelfAwareUncertainty(lm, k=2, max_new_tokens=6)


def test_a_step_with_text_has_an_estimate(lm, estimator, one_torch_thread):
    step = pseudo_step(lm, estimator, PROMPT, stop=["\n"], max_new_tokens=6)
    assert step.text and step.text == step.generation.text.strip()
    assert step.estimate is not None and step.estimate.n_samples >= 1
    assert step.forced_reason is None
    u = step.estimate.value
    assert step.retrieves(u - 1.0) is True
    assert step.retrieves(u) is False  # strictly above δ


def test_an_empty_step_forces_retrieval_without_estimating(lm, estimator, one_torch_thread):
    greedy = lm.generate(PROMPT, max_new_tokens=6, stop=["\n"])[0].text.strip()
    # the greedy answer's first character as a stop string leaves nothing
    step = pseudo_step(lm, estimator, PROMPT, stop=[greedy[0]], max_new_tokens=6)
    assert step.text == "" and step.estimate is None
    assert step.forced_reason.startswith("empty greedy step")
    assert step.retrieves(math.inf) is True


def test_an_undefined_uncertainty_forces_retrieval():
    generation = Generation("Paris", [1], [-0.1], "stop", 5)
    undefined = UncertaintyEstimate(math.nan, 0, math.nan, math.nan, math.nan, ())
    step = PseudoStep(generation, undefined)
    assert step.forced_reason.startswith("U undefined")
    assert step.retrieves(1e9) is True


def test_bad_stops_are_refused(lm, estimator):
    with pytest.raises(ValueError, match=r"stop strings"):
        pseudo_step(lm, estimator, PROMPT, stop=[""], max_new_tokens=4)
