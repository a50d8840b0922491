"""The SKR self-knowledge memory in any LlamaIndex vector store."""

from .memory import LABEL_KEY, VectorStoreMemory

__all__ = ["LABEL_KEY", "VectorStoreMemory"]
