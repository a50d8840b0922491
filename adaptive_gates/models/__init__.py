"""Model backends: a local causal LM, a sentence embedder, chat models (local and
OpenAI-compatible), plus the embedded defaults.

Importing this package is cheap; torch, transformers and openai load on first model use.
"""

from .chat.adapted import AdaptedChatModel
from .chat.base import (
    ChatModel,
    ChatOptions,
    ChatReply,
    ResolvedChatOptions,
    SyncChatModel,
    ThreadedAsyncChat,
    TokenLogprob,
    TokenUsage,
    options_from_openai,
    with_achat,
)
from .chat.batch import achat_each, chat_each, chat_many
from .chat.local import LocalChatModel, chat_model_or_default
from .chat.openai_chat import OpenAIChatModel
from .chat.stream import ChatChunk, StreamingChatModel, astream_chat, stream_chat
from .defaults import EmbedderBackend, default_embedder, default_llm, sentence_embedder
from .embedded import cache_dir, embedded_minilm_dir, embedded_smollm2_gguf
from .embedding.adapted import AdaptedEmbedder
from .embedding.embedder import SentenceEmbedder
from .embedding.onnx.embedder import OnnxEmbedder
from .lm.generation import Generation
from .lm.local import LocalCausalLM, layer_module_path
from .lm.token_stream import TokenStream
from .protocols import Embedder, ProbingLM

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
    "options_from_openai",
    "sentence_embedder",
    "stream_chat",
    "with_achat",
]
