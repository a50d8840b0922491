"""Embeddings both ways between the core and LlamaIndex."""

from .base import AdaptiveGatesEmbedding, LlamaIndexEmbedder

__all__ = ["AdaptiveGatesEmbedding", "LlamaIndexEmbedder"]
