"""SeaKR's multi-hop pipeline (SPEC §4), built on the SeaKR gate and building blocks:
``seakr`` runs retrieval, re-ranking and reasoning end to end on one question;
``runner`` runs it over a QA set, scored and checkpointed."""

from .runner import run_pipeline, summarize
from .seakr import SeaKRPipeline

__all__ = ["SeaKRPipeline", "run_pipeline", "summarize"]
