"""The draft-check gate's cold start: what to decide before any outcome of the model
at hand has been seen.

A gate fitted on one model's outcomes learns which questions *that* model gets
wrong; on another model's answers the same weights were at chance (measured on another
LLM's answers to 500 NQ questions: the Llama-3.1-8B-fitted draft-check −0.06 of the
oracle gap, its strongest Llama signal, "the draft occurs in no passage", −0.18). What
carried over with no fitting was what the model says about itself: an abstention (an
empty or hedged draft, about +0.23) and its stated uncertainty (about +0.19). So the
cold start reads only those, with fixed scores and no fitted weights:

=====================================  =====
the draft is empty or a hedge          1.0
the model says it is uncertain         0.75
the model states no certainty          0.5
the model says it is certain           0.0
=====================================  =====

and retrieves above ``COLD_START_THRESHOLD`` (0.6): on an abstention or stated doubt.
An abstention outranks any certainty stated with it ("unknown, certain" is no answer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...records.answer_metrics import normalize_answer
from ...signals.certainty import CERTAIN, UNCERTAIN
from ...signals.draft import hedge

#: The cold start's need scores (see the module).
ABSTENTION_SCORE = 1.0
UNCERTAIN_SCORE = 0.75
UNSTATED_SCORE = 0.5
CERTAIN_SCORE = 0.0
#: Retrieve above this: on an abstention or stated uncertainty, not otherwise.
COLD_START_THRESHOLD = 0.6


@dataclass(frozen=True)
class ColdStartReading:
    """One draft read by the cold start: its need ``score`` and the ``reason`` a
    person can check (e.g. ``"cold start: the draft is a hedge ('unknown')"``)."""

    score: float
    reason: str


def cold_start_reading(draft: str, certainty: str | None) -> ColdStartReading:
    """The cold start's reading of a ``draft`` (the answer without its certainty
    marker) and the ``certainty`` stated with it (``"certain"``, ``"uncertain"`` or
    ``None``). A non-string draft reads as empty."""
    text = draft if isinstance(draft, str) else ""
    if not normalize_answer(text):
        return ColdStartReading(ABSTENTION_SCORE, "cold start: the draft is empty")
    declined = hedge(text)
    if declined is not None:
        return ColdStartReading(ABSTENTION_SCORE, f"cold start: the draft is a hedge ({declined!r})")
    if certainty == UNCERTAIN:
        return ColdStartReading(UNCERTAIN_SCORE, "cold start: the model says it is uncertain")
    if certainty == CERTAIN:
        return ColdStartReading(CERTAIN_SCORE, "cold start: the model says it is certain")
    return ColdStartReading(UNSTATED_SCORE, "cold start: the model states no certainty")


def cold_start_scores(drafts: Sequence[str], certainties: Sequence[str | None]) -> np.ndarray:
    """The cold start's need score of each draft with its stated certainty."""
    if len(drafts) != len(certainties):
        raise ValueError(f"got {len(drafts)} drafts and {len(certainties)} certainties")
    return np.array([cold_start_reading(d, c).score for d, c in zip(drafts, certainties)], dtype=np.float64)
