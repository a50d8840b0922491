"""SeaKR's self-aware re-ranking as a LlamaIndex node postprocessor (``SeaKRRerank``)."""

from .base import ERROR_KEY, RETRIEVAL_SCORE_KEY, UNCERTAINTY_KEY, SeaKRRerank
from .settings import FAST_SAMPLING, PAPER_SAMPLING

__all__ = ["ERROR_KEY", "FAST_SAMPLING", "PAPER_SAMPLING", "RETRIEVAL_SCORE_KEY", "UNCERTAINTY_KEY", "SeaKRRerank"]
