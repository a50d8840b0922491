"""A retriever that retrieves only when its gate says the LLM needs it; a router's
retrieve choice over the passages a draft-check gate already retrieved; and any
LlamaIndex retriever behind the core's retriever protocol."""

from .base import BUNDLE_ATTRIBUTE, METADATA_KEY, GatedNodes, GatedRetriever, bundle_decision
from .passages import GatePassagesRetriever, LlamaIndexRetriever

__all__ = [
    "BUNDLE_ATTRIBUTE",
    "METADATA_KEY",
    "GatePassagesRetriever",
    "GatedNodes",
    "GatedRetriever",
    "LlamaIndexRetriever",
    "bundle_decision",
]
