"""What a gate that decides through a fitted feature combiner (the stacked gate, the
draft-check gate) shows of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .features import FeatureCombiner

if TYPE_CHECKING:
    from ...errors import NotFittedError


class HoldsCombiner:
    """Mixed into a gate whose fitted state holds ``_combiner``."""

    _combiner: FeatureCombiner | None

    if TYPE_CHECKING:  # what the gate it mixes into provides

        def _not_fitted(self) -> NotFittedError: ...

    @property
    def combiner_(self) -> FeatureCombiner:
        """The fitted combiner (``NotFittedError`` before a fit)."""
        if self._combiner is None:
            raise self._not_fitted()
        return self._combiner
