"""Model backends: a local causal LM, a sentence embedder, chat models (local and
OpenAI-compatible), plus the embedded defaults.

Importing this package is cheap; torch, transformers and openai load on first model use.
"""

from .adapted_chat import AdaptedChatModel
from .adapted_embedder import AdaptedEmbedder
from .chat import (
    ChatModel,
    ChatOptions,
    ChatReply,
    ResolvedChatOptions,
    SyncChatModel,
    ThreadedAsyncChat,
    TokenLogprob,
    TokenUsage,
    with_achat,
)
from .chat_batch import achat_each, chat_each, chat_many
from .chat_stream import ChatChunk, StreamingChatModel, astream_chat, stream_chat
from .defaults import EmbedderBackend, default_embedder, default_llm, sentence_embedder
from .embedded import cache_dir, embedded_minilm_dir, embedded_smollm2_gguf
from .embedder import SentenceEmbedder
from .generation import Generation
from .local_chat import LocalChatModel, chat_model_or_default
from .local_lm import LocalCausalLM, layer_module_path
from .onnx_embedder import OnnxEmbedder
from .openai_chat import OpenAIChatModel
from .protocols import Embedder, ProbingLM
from .token_stream import TokenStream

__all__ = [
    "AdaptedChatModel",
    "AdaptedEmbedder",
    "ChatChunk",
    "ChatModel",
    "ChatOptions",
    "ChatReply",
    "Embedder",
    "EmbedderBackend",
    "Generation",
    "LocalCausalLM",
    "LocalChatModel",
    "OnnxEmbedder",
    "OpenAIChatModel",
    "ProbingLM",
    "ResolvedChatOptions",
    "SentenceEmbedder",
    "StreamingChatModel",
    "SyncChatModel",
    "ThreadedAsyncChat",
    "TokenLogprob",
    "TokenStream",
    "TokenUsage",
    "achat_each",
    "astream_chat",
    "cache_dir",
    "chat_each",
    "chat_many",
    "chat_model_or_default",
    "default_embedder",
    "default_llm",
    "embedded_minilm_dir",
    "embedded_smollm2_gguf",
    "layer_module_path",
    "sentence_embedder",
    "stream_chat",
    "with_achat",
]
