"""What every gate that learns from feedback shares: its log, and how an observation
is checked, labelled and logged. The gate adds only what it learns (``_learn``)."""

from __future__ import annotations

import logging

from ..feedback import Feedback, FeedbackLog, check_feedback
from ..validation import check_question

logger = logging.getLogger(__name__)


class LearnsFromFeedback:
    """Mixin for a ``Gate`` that learns online; list it before ``Gate`` in the bases.

    The gate keeps ``self._feedback`` (a ``FeedbackLog``, started empty by ``fit``)."""

    _feedback: FeedbackLog | None

    @property
    def learns_online(self) -> bool:
        return True

    @property
    def feedback_(self) -> FeedbackLog:
        """Every feedback observation since the gate was fitted (fitted state)."""
        self._check_fitted()  # type: ignore[attr-defined]
        return self._feedback  # type: ignore[return-value]

    def record_feedback(self, question: str, retrieved: bool, correct: bool) -> Feedback:
        """Learn from one answered question. Returns the logged observation with the
        self-knowledge label the feedback rule gives it (see ``adaptive_gates.feedback``)."""
        self._check_fitted()  # type: ignore[attr-defined]
        clean = check_question(question)
        retrieved, correct = check_feedback(retrieved, correct)
        entry = self.feedback_.observe(clean, retrieved, correct)
        self._learn(entry)
        self.feedback_.append(entry)  # logged once learned, so the log never runs ahead of the gate
        logger.debug("%s feedback: %s", self.name, entry)  # type: ignore[attr-defined]
        return entry

    def _learn(self, entry: Feedback) -> None:
        """What this gate does with one observation as it arrives (it is logged after)."""
