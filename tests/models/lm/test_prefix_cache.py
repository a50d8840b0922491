"""The prompt-prefix KV cache of ``LocalCausalLM`` on the real embedded SmolLM2.

The prompts are the SeaKR pipeline's with two of its demonstrations: a ~120-token demo
block, then the question (with a step, or a snippet); the cache works on token ids, so
a longer block would show nothing more. With the cache on, every output must be what the same calls give
without it: the same tokens and texts, log-probabilities, energies and probed states
equal up to float rounding (the cached prefix is computed in a separate forward pass).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from adaptive_gates.models import LocalCausalLM, layer_module_path
from adaptive_gates.seakr.reasoning_prompt import DEFAULT_DEMOS, STEP_STOPS, build_prompt, snippet_template

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"
SNIPPET = "First for Women is a woman's magazine published by Bauer Media Group in the USA. It was started in 1989."
DEMOS = DEFAULT_DEMOS[:2]
GATE = build_prompt(QUESTION, demos=DEMOS)
READ = build_prompt(QUESTION, ["Arthur's Magazine was started in 1844."], [SNIPPET], demos=DEMOS)
TOLERANCE = 1e-4


def calls(lm: LocalCausalLM) -> list:
    """The pipeline's calls on two prompts: a greedy step (it ends at a stop), its U
    samples, plain samples. A few sampled tokens show the cache extended as well as
    more would."""
    out = []
    for prompt in (GATE, READ):
        out.append(lm.generate(prompt, max_new_tokens=16, stop=list(STEP_STOPS), formatted=True)[0])
        out.append(
            lm.sample_with_states(
                prompt,
                3,
                module_path=layer_module_path(15),
                max_new_tokens=4,
                stop=list(STEP_STOPS),
                formatted=True,
                seed=3,
            )
        )
        out.append(lm.sample(prompt, 3, max_new_tokens=3, formatted=True, seed=5))
    return out


@pytest.fixture(scope="module")
def runs(lm: LocalCausalLM) -> tuple[list, list, dict]:
    """The calls without, then with the cache; and what the cache held at the end."""
    without = calls(lm)
    with lm.prefix_cache(4):
        cached = calls(lm)
        kept = {key: cache.get_seq_length() for key, cache in lm._prefixes._entries.items()}
    return without, cached, kept


def ids(lm: LocalCausalLM, text: str) -> list[int]:
    return lm._encode([text], "left").input_ids[0].tolist()


def assert_same_generation(a, b) -> None:
    fields = ("text", "token_ids", "finish_reason", "prompt_tokens")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=TOLERANCE)


def test_cache_is_off_by_default_and_sizes_are_checked(lm: LocalCausalLM) -> None:
    assert LocalCausalLM().prefix_cache_size == 0 and lm._prefixes is None
    for bad in (-1, True, 2.0):
        with pytest.raises(ValueError, match="prefix_cache_size"):
            LocalCausalLM(prefix_cache_size=bad)
    with pytest.raises(ValueError, match="size"), lm.prefix_cache(0):
        pass


def test_prefix_ends_where_the_tokenizations_agree(lm: LocalCausalLM) -> None:
    demo = "\n\n".join(d.render() for d in DEMOS) + "\n\n"
    gate, read, alone = ids(lm, GATE), ids(lm, READ), ids(lm, demo)
    # The demo block's final blank line is one token alone but two inside a prompt, so a
    # prefix registered as text would not match; matching token ids finds the true boundary.
    assert gate[: len(alone) - 1] == alone[:-1] and gate[len(alone) - 1] != alone[-1]
    shared = next(i for i, (x, y) in enumerate(zip(gate, read)) if x != y)
    assert shared > len(alone) - 1
    with lm.prefix_cache(2):
        lm.generate(GATE, max_new_tokens=1, formatted=True)
        cache, reused = lm._prefixes.longest(read[:-1])
    assert reused == shared and cache.get_seq_length() == shared
    assert lm._prefixes is None  # freed when the block closes


def test_greedy_steps_are_identical(runs) -> None:
    without, cached, _ = runs
    for i in (0, 3):
        assert_same_generation(without[i], cached[i])


def test_probed_samples_are_identical(runs) -> None:
    without, cached, _ = runs
    for i in (1, 4):
        for a, b in zip(without[i], cached[i], strict=True):
            assert_same_generation(a.generation, b.generation)
            np.testing.assert_allclose(a.token_energies, b.token_energies, atol=TOLERANCE)
            np.testing.assert_allclose(a.state, b.state, atol=TOLERANCE)


def test_samples_are_identical_for_the_seed(runs) -> None:
    without, cached, _ = runs
    for i in (2, 5):
        for a, b in zip(without[i], cached[i], strict=True):
            assert_same_generation(a, b)


def test_kept_caches_hold_only_their_prompts(runs, lm: LocalCausalLM) -> None:
    """Generation extends the caches it is handed, never the kept copies."""
    _, _, kept = runs
    assert sorted(kept.values()) == sorted(len(ids(lm, p)) - 1 for p in (GATE, READ))
    assert all(length == len(key) for key, length in kept.items())


def test_batches_bypass_the_cache(lm: LocalCausalLM) -> None:
    prompts = ["What is the capital of France?", "Name a primary colour."]
    plain = lm.generate(prompts, max_new_tokens=6)
    with lm.prefix_cache(2):
        assert lm.generate(prompts, max_new_tokens=6) == plain
        assert not lm._prefixes._entries


def test_threads_share_the_cache_safely(runs, lm: LocalCausalLM) -> None:
    without, _, _ = runs

    def step(prompt: str):
        with lm.prefix_cache(2):
            return lm.generate(prompt, max_new_tokens=16, stop=list(STEP_STOPS), formatted=True)[0]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(step, [GATE, READ, READ, GATE]))
    for got, want in zip(results, [without[0], without[3], without[3], without[0]]):
        assert_same_generation(got, want)
    assert lm._prefixes is None and not lm._prefix_scopes


def test_reranker_prompt_of_the_chosen_snippet_is_the_step_prompt() -> None:
    """Why the pipeline reuses whole prompts: re-ranking and reading the chosen snippet
    send the same text, so the step is generated from the kept cache."""
    from adaptive_gates.answering.prompts import fill

    reasoning = " Arthur's Magazine was started in 1844."
    rerank = fill(snippet_template(DEMOS), snippet=SNIPPET, question=QUESTION, reasoning=reasoning)
    assert rerank == READ
