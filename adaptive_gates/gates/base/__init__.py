"""The gate contract: the ``Gate`` base class and what every gate shares (parameters,
constraints, saving, assessment, asking an LLM, folds, calibration, listeners, driving,
feedback, conformance)."""

from .gate import (
    G,
    Gate,
    Scored,
    load_gate,
    logger,
)

__all__ = [
    "G",
    "Gate",
    "Scored",
    "load_gate",
    "logger",
]
