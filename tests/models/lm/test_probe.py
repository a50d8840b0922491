"""SeaKR's probe on the embedded SmolLM2: seeded samples, each with a sub-module's
output at the EOS that closes it, checked against plain forward passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adaptive_gates.models.lm.local import layer_module_path
from adaptive_gates.models.lm.probe import ProbedSample, sample_with_states

PROMPT = "Name a fruit."
MODULE = layer_module_path(20)


@pytest.fixture(scope="module")
def samples(lm, one_torch_thread):
    return sample_with_states(lm, PROMPT, 3, module_path=MODULE, max_new_tokens=3, seed=0)


def _fed(lm, sample: ProbedSample) -> list[int]:
    """The tokens the probe fed after the prompt: the sample's, its stop token replaced by
    EOS, with EOS appended unless the model emitted it."""
    g = sample.generation
    if g.finish_reason == "eos":
        return list(g.token_ids)
    body = g.token_ids[:-1] if g.finish_reason == "stop" else g.token_ids
    return [*body, lm.eos_token_id]


def _prompt_ids(lm, prompt: str) -> list[int]:
    return lm.tokenizer(lm.format_prompt(prompt), add_special_tokens=False).input_ids


def _check_against_forward(lm, prompt: str, sample: ProbedSample) -> None:
    """The state, energies and log-probs a plain forward pass gives for the same tokens."""
    prompt_ids = _prompt_ids(lm, prompt)
    g = sample.generation
    assert g.prompt_tokens == len(prompt_ids)
    ids = torch.tensor([prompt_ids + _fed(lm, sample)])
    with lm.capture(MODULE) as outputs, torch.inference_mode():
        logits = lm.model(input_ids=ids).logits[0].float()
    np.testing.assert_allclose(sample.state, outputs[0][0, -1].numpy(), atol=2e-3, rtol=1e-3)
    steps = logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(g.token_ids)]
    np.testing.assert_allclose(sample.token_energies, (-torch.logsumexp(steps, dim=-1)).numpy(), atol=2e-3)
    expected = torch.log_softmax(steps, dim=-1).gather(1, torch.tensor(g.token_ids)[:, None]).squeeze(1)
    np.testing.assert_allclose(g.token_logprobs, expected.numpy(), atol=2e-3)


def test_each_sample_holds_a_continuation_and_a_state(samples, lm):
    assert len(samples) == 3
    for s in samples:
        g = s.generation
        assert g.finish_reason in {"length", "eos"}
        assert 1 <= len(g.token_ids) <= 3
        assert len(g.token_logprobs) == len(s.token_energies) == len(g.token_ids)
        assert all(lp <= 0 for lp in g.token_logprobs)
        assert s.state.shape == (lm.hidden_size,) and s.state.dtype == np.float32
        assert np.isfinite(s.state).all()
        if g.finish_reason == "length":
            assert len(g.token_ids) == 3
            assert g.text == lm.tokenizer.decode(g.token_ids, skip_special_tokens=True)


def test_the_state_is_the_modules_output_at_the_closing_eos(samples, lm):
    for s in samples:
        _check_against_forward(lm, PROMPT, s)


def test_samples_are_reproducible_and_numbered(samples, lm):
    again = sample_with_states(lm, PROMPT, 3, module_path=MODULE, max_new_tokens=3, seed=0)
    assert [s.generation.token_ids for s in again] == [s.generation.token_ids for s in samples]
    first_two = sample_with_states(lm, PROMPT, 2, module_path=MODULE, max_new_tokens=3, seed=0)
    third = sample_with_states(lm, PROMPT, 1, module_path=MODULE, max_new_tokens=3, seed=0, first_sample=2)
    assert [s.generation.token_ids for s in first_two + third] == [s.generation.token_ids for s in samples]
    np.testing.assert_allclose(third[0].state, samples[2].state, atol=1e-3)


def test_another_seed_draws_other_samples(lm):
    def draws(seed):
        found = sample_with_states(
            lm,
            "Say a random word.",
            4,
            module_path=MODULE,
            max_new_tokens=3,
            seed=seed,
            temperature=1.5,
            top_k=0,
            top_p=1.0,
        )
        return [tuple(s.generation.token_ids) for s in found]

    assert draws(1) != draws(2)


def test_a_stop_string_ends_a_sample_and_eos_replaces_its_token(lm):
    found = sample_with_states(lm, "Who wrote Hamlet?", 2, module_path=MODULE, max_new_tokens=6, seed=0, stop=[" "])
    for s in found:
        g = s.generation
        assert " " not in g.text
        if g.finish_reason == "stop":
            assert " " in lm.tokenizer.decode(g.token_ids)  # the stop token is reported
        _check_against_forward(lm, "Who wrote Hamlet?", s)
    assert any(s.generation.finish_reason == "stop" for s in found)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"first_sample": -1}, "first_sample"),
        ({"first_sample": True}, "first_sample"),
        ({"k": 0}, "k must be"),
        ({"temperature": 0.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"stop": [""]}, "stop"),
        ({"module_path": "model.layers.99"}, "no sub-module"),
    ],
)
def test_bad_arguments_are_refused(lm, kwargs, problem):
    arguments = {"k": 1, "module_path": MODULE, "max_new_tokens": 2, **kwargs}
    with pytest.raises(ValueError, match=problem):
        sample_with_states(lm, PROMPT, **arguments)


@pytest.mark.parametrize("prompt", [["a", "b"], "", "  "])
def test_one_non_empty_prompt_string_is_needed(lm, prompt):
    with pytest.raises(ValueError):
        sample_with_states(lm, prompt, 1, module_path=MODULE)


def test_the_local_lm_offers_the_probe_as_a_method(lm, samples):
    found = lm.sample_with_states(PROMPT, 1, module_path=MODULE, max_new_tokens=3, seed=0)
    assert found[0].generation.token_ids == samples[0].generation.token_ids


def test_the_prefix_cache_gives_the_same_samples(lm, samples):
    with lm.prefix_cache(2):
        first = sample_with_states(lm, PROMPT, 3, module_path=MODULE, max_new_tokens=3, seed=0)
        again = sample_with_states(lm, PROMPT, 3, module_path=MODULE, max_new_tokens=3, seed=0)  # from the cache
    for found in (first, again):
        assert [s.generation.token_ids for s in found] == [s.generation.token_ids for s in samples]
        for mine, theirs in zip(found, samples):
            np.testing.assert_allclose(mine.state, theirs.state, atol=1e-3, rtol=1e-3)
