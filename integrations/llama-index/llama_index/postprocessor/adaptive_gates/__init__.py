"""SeaKR's self-aware re-ranking as a LlamaIndex node postprocessor (``SeaKRRerank``)."""

from .base import ERROR_KEY, UNCERTAINTY_KEY, SeaKRRerank

__all__ = ["ERROR_KEY", "UNCERTAINTY_KEY", "SeaKRRerank"]
