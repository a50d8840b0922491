"""A retriever that retrieves only when its gate says the LLM needs it."""

from .base import BUNDLE_ATTRIBUTE, METADATA_KEY, GatedNodes, GatedRetriever, bundle_decision

__all__ = ["BUNDLE_ATTRIBUTE", "METADATA_KEY", "GatedNodes", "GatedRetriever", "bundle_decision"]
