"""Chat models: the protocol and its records (``base``), batches and streams, the local,
OpenAI and adapted chat models."""

from .base import (
    ChatModel,
    ChatOptions,
    ChatReply,
    Message,
    ResolvedChatOptions,
    SyncChatModel,
    ThreadedAsyncChat,
    TokenUsage,
    check_messages,
    user,
    with_achat,
)

__all__ = [
    "ChatModel",
    "ChatOptions",
    "ChatReply",
    "Message",
    "ResolvedChatOptions",
    "SyncChatModel",
    "ThreadedAsyncChat",
    "TokenUsage",
    "check_messages",
    "user",
    "with_achat",
]
