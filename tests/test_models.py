"""Model backends against the real embedded SmolLM2-135M-Instruct and all-MiniLM-L6-v2."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from adaptive_gates.errors import BackendError
from adaptive_gates.models import (
    ChatModel,
    Embedder,
    LocalCausalLM,
    SentenceEmbedder,
    cache_dir,
    default_embedder,
    default_llm,
    layer_module_path,
)
from adaptive_gates.models.lm import local as local_lm

FRANCE = "What is the capital of France?"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder()


def test_importing_models_does_not_import_torch() -> None:
    code = (
        "import sys, adaptive_gates.models; "
        "print(any(m.split('.')[0] in ('torch', 'transformers', 'sentence_transformers') "
        "for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_dequantized_copy_is_cached(lm: LocalCausalLM) -> None:
    config = cache_dir() / "smollm2-135m-instruct-f32" / "config.json"
    assert config.is_file()
    assert "quantization_config" not in json.loads(config.read_text())
    assert lm.num_layers == 30 and lm.hidden_size == 576
    assert lm.model_id.startswith("SmolLM2-135M-Instruct")


def test_greedy_answer_is_deterministic_and_ends_with_eos(lm: LocalCausalLM) -> None:
    first, second = lm.generate(FRANCE), lm.generate(FRANCE)
    assert first == second
    (g,) = first
    assert "Paris" in g.text
    assert g.finish_reason == "eos"
    assert g.token_ids[-1] == lm.eos_token_id
    assert "<|im_end|>" not in g.text
    assert len(g.token_logprobs) == len(g.token_ids)
    assert g.prompt_tokens == len(lm.tokenizer(lm.format_prompt(FRANCE)).input_ids)


def test_local_lm_is_not_mistaken_for_a_chat_model(lm: LocalCausalLM, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its chat-template switch once was an attribute named ``chat``, which satisfied the
    # runtime ChatModel check, so the LM was called as if it were a chat model.
    assert not isinstance(lm, ChatModel)
    assert lm.use_chat_template and lm.format_prompt(FRANCE).startswith("<|im_start|>")
    monkeypatch.setattr(lm, "use_chat_template", False)
    assert lm.format_prompt(FRANCE) == FRANCE


def test_generation_logprobs_match_token_logprobs(lm: LocalCausalLM) -> None:
    (g,) = lm.generate(FRANCE)
    rescored = lm.token_logprobs(lm.format_prompt(FRANCE), g.text)
    # The text without its EOS re-tokenizes to the same tokens.
    assert len(rescored) == len(g.token_ids) - 1
    np.testing.assert_allclose(rescored, g.token_logprobs[:-1], atol=1e-3)


def test_stop_string_cuts_text_and_length_cap(lm: LocalCausalLM) -> None:
    prompt = "Name three colors, separated by commas."
    (free,) = lm.generate(prompt, max_new_tokens=10)
    assert free.finish_reason == "length" and len(free.token_ids) == 10
    (stopped,) = lm.generate(prompt, max_new_tokens=12, stop=[","])
    assert stopped.finish_reason == "stop"
    assert "," not in stopped.text and stopped.text
    assert "," in lm.tokenizer.decode(stopped.token_ids)  # the stopping token is kept
    assert free.text.startswith(stopped.text + ",")


def test_each_stop_list_is_honoured_while_their_criteria_are_kept(lm: LocalCausalLM, monkeypatch) -> None:
    # Stop criteria are built once per stop list and kept (a few): a kept one must never
    # answer for another list, and the oldest goes when the bound is reached.
    monkeypatch.setattr(local_lm, "_KEPT_STOP_CRITERIA", 2)
    prompt = "Name three colors, separated by commas."
    (comma,) = lm.generate(prompt, max_new_tokens=12, stop=[","])
    (space,) = lm.generate(prompt, max_new_tokens=12, stop=[" "])
    (comma_again,) = lm.generate(prompt, max_new_tokens=12, stop=[","])
    assert "," not in comma.text and " " not in space.text
    assert comma.text != space.text and comma_again.token_ids == comma.token_ids
    lm.generate(prompt, max_new_tokens=1, stop=["."])
    assert list(lm._stop_criteria) == [(",",), (".",)]


def test_batched_generation_equals_one_by_one(lm: LocalCausalLM) -> None:
    prompts = [FRANCE, "Hi", "Explain in one sentence why the sky looks blue during the day."]
    batched = lm.generate(prompts, max_new_tokens=8)
    for prompt, together in zip(prompts, batched):
        (alone,) = lm.generate(prompt, max_new_tokens=8)
        assert together.token_ids == alone.token_ids
        assert together.text == alone.text
        assert together.prompt_tokens == alone.prompt_tokens
        np.testing.assert_allclose(together.token_logprobs, alone.token_logprobs, atol=1e-3)


def test_invalid_prompts_raise_value_error(lm: LocalCausalLM) -> None:
    with pytest.raises(ValueError, match="at least one prompt"):
        lm.generate([])
    with pytest.raises(ValueError, match="empty"):
        lm.generate(["fine", "   "])


def test_unloadable_model_raises_backend_error() -> None:
    broken = LocalCausalLM("/nonexistent/adaptive-gates-model")
    with pytest.raises(BackendError, match="/nonexistent/adaptive-gates-model"):
        broken.generate("hello")


def test_sample_is_seeded_and_shares_the_prefill(lm: LocalCausalLM) -> None:
    import torch

    prompt = "Write a short poem about the sea."
    a = lm.sample(prompt, k=4, max_new_tokens=8, seed=0)
    b = lm.sample(prompt, k=4, max_new_tokens=8, seed=0)
    c = lm.sample(prompt, k=4, max_new_tokens=8, seed=1)
    assert len(a) == 4
    assert [g.text for g in a] == [g.text for g in b]
    assert [g.text for g in a] != [g.text for g in c]
    for g in a + c:
        assert len(g.token_logprobs) == len(g.token_ids) > 0
        assert all(math.isfinite(x) and x <= 0 for x in g.token_logprobs)
    # Prefix sharing draws exactly what a plain num_return_sequences generate draws.
    ids = lm.tokenizer(lm.format_prompt(prompt), return_tensors="pt").input_ids
    with torch.inference_mode(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        plain = lm.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            num_return_sequences=4,
            do_sample=True,
            temperature=1.0,
            top_k=50,
            top_p=0.9,
            max_new_tokens=8,
            pad_token_id=lm.tokenizer.pad_token_id,
        )
    for g, row in zip(a, plain[:, ids.shape[1] :].tolist()):
        assert g.token_ids == row[: len(g.token_ids)]


def test_hidden_states_shapes_and_padding(lm: LocalCausalLM) -> None:
    texts = ["short", "a considerably longer text that forces padding of the short one"]
    for pooling in ("last_token", "mean"):
        batch = lm.hidden_states(texts, layers=[0, 15, -1], pooling=pooling)
        assert batch.shape == (2, 3, 576) and batch.dtype == np.float32
        alone = lm.hidden_states(texts[:1], layers=[0, 15, -1], pooling=pooling)
        # Padded vs alone in float32 differ by rounding only: measured over several texts,
        # up to 5e-5 in the final (normed) layer and up to 1e-3 in inner layers, which carry
        # ~1e4-sized "massive activations", so those are compared relatively too.
        np.testing.assert_allclose(batch[:1, -1], alone[:, -1], atol=1e-3)
        np.testing.assert_allclose(batch[:1], alone, rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError):
        lm.hidden_states(texts, layers=[31])


def test_capture_collects_mlp_outputs_and_removes_hook(lm: LocalCausalLM) -> None:
    path = layer_module_path(lm.num_layers // 2)
    assert path == "model.layers.15.mlp"
    module = lm.model.get_submodule(path)
    with lm.capture(path) as outputs:
        lm.hidden_states(["hello world", "hi"])
    assert len(outputs) == 1
    assert outputs[0].shape[0] == 2 and outputs[0].shape[-1] == lm.hidden_size
    assert not module._forward_hooks
    with pytest.raises(RuntimeError), lm.capture(path):
        raise RuntimeError("boom")
    assert not module._forward_hooks


def test_default_singletons() -> None:
    assert default_llm() is default_llm()
    assert default_embedder() is default_embedder()


def test_embedder_basics(embedder: SentenceEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    vectors = embedder.embed(["The cat sits on the mat.", "A cat is sitting on a rug.", "Stock markets fell sharply."])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError):
        embedder.embed("a single string")


def test_embedder_thread_safety(embedder: SentenceEmbedder) -> None:
    batches = [[f"question number {i} about topic {j}" for j in range(5)] for i in range(8)]
    serial = [embedder.embed(b) for b in batches]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(embedder.embed, batches))
    for s, p in zip(serial, parallel):
        np.testing.assert_allclose(s, p, atol=1e-6)
