"""Learning in production from shadow outcomes: the observations (``observations``), the
gate's side of learning (``learning``) and the learner the doors share (``learner``)."""

from .observations import (
    LOG_FILE,
    MIN_ROWS,
    SOURCES,
    TARGET,
    FitRows,
    Observation,
    Refit,
    ShadowLog,
    Source,
    agreement_helps,
    logger,
    pair,
    refit,
    same_question,
    teaching,
    verdict,
)

__all__ = [
    "LOG_FILE",
    "MIN_ROWS",
    "SOURCES",
    "TARGET",
    "FitRows",
    "Observation",
    "Refit",
    "ShadowLog",
    "Source",
    "agreement_helps",
    "logger",
    "pair",
    "refit",
    "same_question",
    "teaching",
    "verdict",
]
