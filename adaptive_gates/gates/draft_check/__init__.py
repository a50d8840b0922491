"""The draft-check gate and its parts: the cold start, the agreement check, the domain
columns and the draft embedding."""

from .gate import (
    AGREEMENT,
    COLUMNS,
    TOP_LOGPROBS,
    DraftCheckGate,
    logger,
    retriever_kind,
)

__all__ = [
    "AGREEMENT",
    "COLUMNS",
    "TOP_LOGPROBS",
    "DraftCheckGate",
    "logger",
    "retriever_kind",
]
