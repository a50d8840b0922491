"""The gated query engine as a LlamaPack: documents in, answers out, retrieval only
when the gate says the LLM needs it."""

from .base import AdaptiveRAGPack

__all__ = ["AdaptiveRAGPack"]
