"""The core's chat models as a LlamaIndex LLM (``AdaptiveGatesLLM``), and any LlamaIndex
LLM as the core's chat model (``LlamaIndexChatModel``)."""

from .base import AdaptiveGatesLLM, token_logprobs
from .core_chat import LlamaIndexChatModel
from .messages import from_core_messages, to_core_messages

__all__ = ["AdaptiveGatesLLM", "LlamaIndexChatModel", "from_core_messages", "to_core_messages", "token_logprobs"]
