"""LangChain's default models when an embedded model's weight package is missing:
``AdaptiveGatesChatModel()`` and ``AdaptiveGatesEmbeddings()`` raise as they are built,
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
from langchain_adaptive_gates import AdaptiveGatesChatModel, AdaptiveGatesEmbeddings
"""
)


def test_the_default_models_name_their_packages_when_built(tmp_path):
    outcomes = outcomes_without(
        WEIGHT_PACKAGES,
        tmp_path,
        SETUP,
        {
            "chat": "AdaptiveGatesChatModel()",
            "chat with options": "AdaptiveGatesChatModel(max_tokens=8, temperature=0.0)",
            "embeddings": "AdaptiveGatesEmbeddings()",
            "given chat": "AdaptiveGatesChatModel(chat_model=EchoChat()).invoke('hello').content",
            "given embedder": "AdaptiveGatesEmbeddings(given_embedder).embed_query('hello')",
        },
    )
    for name, install in (
        ("chat", SMOLLM2_INSTALL),
        ("chat with options", SMOLLM2_INSTALL),
        ("embeddings", MINILM_INSTALL),
    ):
        assert_names_its_package(outcomes[name], install)
    assert outcomes["given chat"] == {"returned": "str"}
    assert outcomes["given embedder"] == {"returned": "list"}
