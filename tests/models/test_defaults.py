"""The process-wide default models and the embedder factory."""

from __future__ import annotations

import pytest

from adaptive_gates.models import defaults
from adaptive_gates.models.defaults import (
    MINILM_ID,
    SMOLLM2_ID,
    default_embedder,
    default_llm,
    sentence_embedder,
)
from adaptive_gates.models.embedding.embedder import SentenceEmbedder
from adaptive_gates.models.embedding.onnx.embedder import OnnxEmbedder
from adaptive_gates.models.lm.local import LocalCausalLM


def test_default_llm_is_one_embedded_smollm2_per_process(lm):
    assert default_llm() is default_llm() is lm
    assert isinstance(lm, LocalCausalLM)
    assert lm.model_id == SMOLLM2_ID


def test_default_embedder_is_one_minilm_per_backend(embedder):
    assert default_embedder() is default_embedder("auto") is embedder
    assert embedder.model_id == MINILM_ID
    # onnxruntime is installed here: "auto" is onnx, and the same instance as asking for it
    assert isinstance(embedder, OnnxEmbedder)
    assert default_embedder("onnx") is embedder
    assert embedder.backend == "onnx"


def test_the_torch_default_is_a_sentence_embedder_of_the_same_model():
    torch_default = default_embedder("torch")
    assert isinstance(torch_default, SentenceEmbedder)
    assert default_embedder("torch") is torch_default
    assert torch_default.model_id == MINILM_ID
    assert torch_default.settings() == default_embedder().settings()


def test_sentence_embedder_builds_a_new_one_each_time():
    first, second = sentence_embedder(), sentence_embedder()
    assert first is not second
    assert isinstance(first, OnnxEmbedder)
    assert isinstance(sentence_embedder(backend="onnx"), OnnxEmbedder)
    torch_one = sentence_embedder(backend="torch", batch_size=4)
    assert isinstance(torch_one, SentenceEmbedder)
    assert torch_one.batch_size == 4
    assert sentence_embedder(batch_size=5).batch_size == 5
    assert sentence_embedder("/a/model/folder").model_id == "/a/model/folder"


def test_both_backends_give_the_same_vectors(embedder):
    texts = ["Who painted the Mona Lisa?", "boiling point of water"]
    onnx, torch = embedder.embed(texts), default_embedder("torch").embed(texts)
    assert (onnx * torch).sum(axis=1).min() > 0.9999


@pytest.mark.parametrize("backend", ["cuda", "ONNX", None, ""])
def test_an_unknown_backend_is_refused(backend):
    with pytest.raises(ValueError, match="backend must be one of"):
        sentence_embedder(backend=backend)
    with pytest.raises(ValueError, match="backend must be one of"):
        default_embedder(backend)


def test_the_ids_are_exported_for_gates_to_record():
    assert {"MINILM_ID", "SMOLLM2_ID", "default_llm", "default_embedder"} <= set(defaults.__all__)
