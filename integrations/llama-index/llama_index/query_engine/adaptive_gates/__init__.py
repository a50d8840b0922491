"""An adaptive query engine (a gate, a retriever and an LLM in one object) and its chat
engine variant, which gates on the conversation's standalone question."""

from llama_index.selectors.adaptive_gates.gating import ROUTES

from .base import DEFAULT_DIRECT_PROMPT, METADATA_KEY, ROUTE_KEY, AdaptiveQueryEngine
from .chat import CONDENSE_ERROR_KEY, QUESTION_KEY, AdaptiveChatEngine
from .draft import DraftQueryEngine

__all__ = [
    "CONDENSE_ERROR_KEY",
    "DEFAULT_DIRECT_PROMPT",
    "METADATA_KEY",
    "QUESTION_KEY",
    "ROUTES",
    "ROUTE_KEY",
    "AdaptiveChatEngine",
    "AdaptiveQueryEngine",
    "DraftQueryEngine",
]
