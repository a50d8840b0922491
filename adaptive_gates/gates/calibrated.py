"""A gate's threshold: the method's own, or one calibrated on held-out questions, for a
retrieval rate or for accuracy (``adaptive_gates.calibration``), and read for a rate."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Self

import numpy as np

from ..calibration import Calibration, threshold_for_objective, threshold_for_rate

logger = logging.getLogger(__name__)


class Calibrated(ABC):
    """The threshold ``Gate`` decides by (``Gate`` derives from it): calibrated, else the
    method's own. The gate provides its name, ``score``, ``_default_threshold`` and
    ``_check_fitted``."""

    name: ClassVar[str]
    _calibration: Calibration | None

    @abstractmethod
    def score(self, questions: Sequence[str]) -> np.ndarray:
        """Need scores for a batch of questions."""

    @abstractmethod
    def _default_threshold(self) -> float:
        """The method's own threshold, used until the gate is calibrated."""

    @abstractmethod
    def _check_fitted(self) -> None:
        """Raise ``NotFittedError`` unless the gate is fitted."""

    @property
    def threshold_(self) -> float:
        """The calibrated threshold if any, else the method's own."""
        self._check_fitted()
        if self._calibration is not None:
            return self._calibration.threshold
        return self._default_threshold()

    @property
    def calibration_(self) -> Calibration | None:
        """How the threshold was calibrated (``None``: the method's own rule)."""
        return self._calibration

    def threshold_at_rate(self, rate: float) -> float:
        """The threshold that would have retrieved about ``rate`` of the questions this
        gate was calibrated on (either kind of calibration keeps a sample of their
        scores): how a service honours a per-request retrieval budget without scoring
        anything again. An uncalibrated gate raises ``ValueError``."""
        self._check_fitted()
        if self._calibration is None:
            raise ValueError(
                f"{self.name} is not calibrated: a threshold for a rate is read from the scores of the "
                "questions it was calibrated on; call gate.calibrate(questions, ...) first"
            )
        return self._calibration.threshold_at_rate(rate)

    def reset_threshold(self) -> Self:
        """Drop any calibration and go back to the method's own rule."""
        self._calibration = None
        return self

    def calibrate(
        self,
        questions: Sequence[str],
        target_rate: float | None = None,
        *,
        correct_without: Sequence[float] | None = None,
        correct_with: Sequence[float] | None = None,
        max_rate: float | None = None,
    ) -> Self:
        """Fit the threshold on held-out questions.

        Either give ``target_rate`` (the share of questions that should retrieve;
        no labels needed), or give per-question correctness without and with
        retrieval to maximise accuracy, optionally under ``max_rate``. Fewer than
        ``MIN_CALIBRATION_QUESTIONS`` (20) questions draw a ``CalibrationWarning``.
        """
        return self.calibrate_scores(
            self.score(questions),
            target_rate,
            correct_without=correct_without,
            correct_with=correct_with,
            max_rate=max_rate,
        )

    def calibrate_scores(
        self,
        scores: np.ndarray,
        target_rate: float | None = None,
        *,
        correct_without: np.ndarray | Sequence[float] | None = None,
        correct_with: np.ndarray | Sequence[float] | None = None,
        max_rate: float | None = None,
    ) -> Self:
        """``calibrate`` from need scores already computed, e.g. out-of-fold
        scores of cross-fitted copies of this gate."""
        self._check_fitted()
        with_outcomes = correct_without is not None or correct_with is not None
        if with_outcomes == (target_rate is not None):
            raise ValueError("give either target_rate or correct_without and correct_with")
        if target_rate is not None:
            if max_rate is not None:
                raise ValueError("max_rate applies to outcome calibration only")
            calibration = threshold_for_rate(scores, target_rate)
        else:
            if correct_without is None or correct_with is None:
                raise ValueError("outcome calibration needs both correct_without and correct_with")
            calibration = threshold_for_objective(scores, correct_without, correct_with, max_rate)
        self._calibration = calibration
        logger.info("%s calibrated: %s", self.name, calibration)
        calibration.warn_if_too_few()
        return self
