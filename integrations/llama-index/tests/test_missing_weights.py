"""LlamaIndex's default models when an embedded model's weight package is missing:
``AdaptiveGatesLLM()`` and ``AdaptiveGatesEmbedding()`` raise as they are built,
naming the command that installs the package; given a model, neither needs it."""

from __future__ import annotations

from support.blocked_imports import (
    GIVEN_MODELS,
    MINILM_INSTALL,
    SMOLLM2_INSTALL,
    WEIGHT_PACKAGES,
    assert_names_its_package,
    outcomes_without,
)

SETUP = (
    GIVEN_MODELS
    + """
from llama_index.embeddings.adaptive_gates import AdaptiveGatesEmbedding
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
"""
)


def test_the_default_models_name_their_packages_when_built(tmp_path):
    outcomes = outcomes_without(
        WEIGHT_PACKAGES,
        tmp_path,
        SETUP,
        {
            "llm": "AdaptiveGatesLLM()",
            "llm with options": "AdaptiveGatesLLM(max_tokens=8, context_window=2048)",
            "embedding": "AdaptiveGatesEmbedding()",
            "named embedding": "AdaptiveGatesEmbedding(model_name='minilm')",
            "given llm": "AdaptiveGatesLLM(chat_model=EchoChat()).complete('hello').text",
            "given embedder": "AdaptiveGatesEmbedding(given_embedder).get_text_embedding('hello')",
        },
    )
    expected = {
        "llm": SMOLLM2_INSTALL,
        "llm with options": SMOLLM2_INSTALL,
        "embedding": MINILM_INSTALL,
        "named embedding": MINILM_INSTALL,
    }
    for name, install in expected.items():
        assert_names_its_package(outcomes[name], install)
    assert outcomes["given llm"] == {"returned": "str"}
    assert outcomes["given embedder"] == {"returned": "list"}
