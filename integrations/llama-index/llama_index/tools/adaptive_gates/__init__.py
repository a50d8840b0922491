"""A retrieval tool for agents that asks the gate before it retrieves."""

from .base import GatedRetrieverTool

__all__ = ["GatedRetrieverTool"]
