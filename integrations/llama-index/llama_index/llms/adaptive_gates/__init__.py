"""The core's chat models as a LlamaIndex LLM (``AdaptiveGatesLLM``)."""

from .base import AdaptiveGatesLLM, token_logprobs
from .messages import from_core_messages, to_core_messages

__all__ = ["AdaptiveGatesLLM", "from_core_messages", "to_core_messages", "token_logprobs"]
