"""SeaKR's sampling shortcuts against the real embedded SmolLM2-135M-Instruct: samples
drawn apart equal samples drawn together, sampling stops early only when the first
samples agree, samples can be capped at the greedy step's length, and these settings
are saved with the gate."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates import SeaKRGate, SelfAwareUncertainty, eigen_score, load_gate
from adaptive_gates.answering.answerer import build_prompt
from adaptive_gates.models import LocalCausalLM, layer_module_path
from adaptive_gates.seakr.step import pseudo_step

KNOWN = build_prompt("What is the capital of France?")  # "Paris" every time at a low temperature
UNKNOWN = build_prompt("who played the mother in the black stallion")  # a new name every sample
STOP = ["\n"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_samples_drawn_one_by_one_equal_the_batch(lm: LocalCausalLM) -> None:
    path = layer_module_path(lm.num_layers // 2)
    # A few tokens tell the draws apart as well as many would.
    together = lm.sample_with_states(UNKNOWN, 4, module_path=path, max_new_tokens=4, stop=STOP, seed=3)
    apart = [
        lm.sample_with_states(UNKNOWN, 1, module_path=path, max_new_tokens=4, stop=STOP, seed=3, first_sample=i)[0]
        for i in range(4)
    ]
    assert [p.generation.token_ids for p in apart] == [p.generation.token_ids for p in together]
    assert len({p.generation.text for p in together}) > 1  # four different draws, not one repeated
    a, b = np.stack([p.state for p in apart]), np.stack([p.state for p in together])
    np.testing.assert_allclose(a, b, atol=1e-4)
    assert eigen_score(a) == pytest.approx(eigen_score(b), abs=1e-3)
    with pytest.raises(ValueError, match="first_sample"):
        lm.sample_with_states(UNKNOWN, 1, module_path=path, first_sample=-1)


def test_early_stop_ends_agreeing_samples_only(lm: LocalCausalLM) -> None:
    settings = {"k": 8, "max_new_tokens": 8}
    cold = {**settings, "temperature": 0.1}
    paper = SelfAwareUncertainty(lm, **cold).estimate(KNOWN, stop=STOP)
    assert paper.n_samples == 8 and not paper.stopped_early  # the paper's option draws all k
    early = SelfAwareUncertainty(lm, **cold, early_stop=3).estimate(KNOWN, stop=STOP)
    assert early.stopped_early and 3 <= early.n_samples < 8
    assert len(set(early.samples)) == 1 and "Paris" in early.samples[0]
    # Its U is that of k samples repeating the agreeing ones: here the faithful value.
    assert early.value == pytest.approx(paper.value, abs=1e-3)

    hot = SelfAwareUncertainty(lm, **settings, early_stop=3).estimate(UNKNOWN, stop=STOP)
    faithful = SelfAwareUncertainty(lm, **settings).estimate(UNKNOWN, stop=STOP)
    assert not hot.stopped_early and hot.n_samples == faithful.n_samples == 8
    assert hot.samples == faithful.samples and hot.value == pytest.approx(faithful.value, abs=1e-3)
    # early_stop = k: one draw of all k, as without the option.
    whole = SelfAwareUncertainty(lm, **settings, early_stop=8).estimate(UNKNOWN, stop=STOP)
    assert whole.samples == faithful.samples and not whole.stopped_early


def test_samples_are_capped_at_the_greedy_step(lm: LocalCausalLM) -> None:
    capped = SelfAwareUncertainty(lm, k=6, max_new_tokens=16, cap_to_greedy=True)
    step = pseudo_step(lm, capped, UNKNOWN, stop=STOP, max_new_tokens=3)
    assert len(step.generation.token_ids) == 3  # the greedy step hit its 3-token budget
    short = SelfAwareUncertainty(lm, k=6, max_new_tokens=3).estimate(UNKNOWN, stop=STOP)
    long = SelfAwareUncertainty(lm, k=6, max_new_tokens=8).estimate(UNKNOWN, stop=STOP)
    assert step.estimate is not None and step.estimate.samples == short.samples != long.samples
    assert step.estimate.value == pytest.approx(short.value, abs=1e-6)
    # Without the option the greedy length is ignored.
    assert SelfAwareUncertainty(lm, k=6, max_new_tokens=8).estimate(UNKNOWN, stop=STOP, greedy_tokens=3) == long


def test_the_options_are_checked_and_saved_with_the_gate(lm: LocalCausalLM, tmp_path) -> None:
    for bad, match in [
        ({"early_stop": 1}, "early_stop"),
        ({"k": 4, "early_stop": 5}, "<= k"),
        ({"cap_to_greedy": 1}, "bool"),
    ]:
        with pytest.raises(ValueError, match=match):
            SelfAwareUncertainty(**bad)
    fast = SelfAwareUncertainty.fast(k=6)
    assert (fast.early_stop, fast.cap_to_greedy, fast.get_params()["early_stop"]) == (5, True, 5)
    gate = SeaKRGate(lm, uncertainty={"k": 4, "max_new_tokens": 6, "early_stop": 3, "cap_to_greedy": True})
    gate.calibrate(["What is the capital of France?", "who played the mother in the black stallion"], target_rate=0.5)
    gate.save(tmp_path / "seakr")
    loaded = load_gate(tmp_path / "seakr", lm=lm)
    assert isinstance(loaded, SeaKRGate)
    assert (loaded.estimator.early_stop, loaded.estimator.cap_to_greedy) == (3, True)
    assert loaded.estimator.get_params() == gate.estimator.get_params()
