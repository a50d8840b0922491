"""The core chat model behind a framework's chat model built on the core (LangChain's
``AdaptiveGatesChatModel``, LlamaIndex's ``AdaptiveGatesLLM``): the one given, or the
embedded SmolLM2."""

from __future__ import annotations

from .chat import ChatModel, LocalChatModel


def chat_model_or_default(chat_model: object | None) -> ChatModel:
    """``chat_model`` once checked to implement ``ChatModel``, or a ``LocalChatModel``
    over the embedded SmolLM2 when it is ``None``; anything else raises ``TypeError``."""
    backend = chat_model if chat_model is not None else LocalChatModel()
    if not isinstance(backend, ChatModel):
        raise TypeError(f"chat_model must implement the core's ChatModel protocol, got {type(backend).__name__}")
    return backend
