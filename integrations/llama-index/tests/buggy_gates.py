"""A real custom gate with a bug in its own rule, for the doors' policy on a gate that
raises: deciding raises past the gate's own guards."""

from __future__ import annotations

import numpy as np

from adaptive_gates import SKRKnnGate

from .conftest import KNOWN, UNKNOWN


class BuggyKnnGate(SKRKnnGate):
    """SKR-kNN with a tie rule that reads an attribute never set."""

    name = "buggy-knn"

    def retrieves(self, scores, threshold=None):
        return np.asarray(scores) > self.tie_threshold  # never set: the bug


def buggy_gate(core_embedder, **params) -> BuggyKnnGate:
    """A fitted ``BuggyKnnGate`` over the hand-labelled memory."""
    return BuggyKnnGate(core_embedder, k=1, **params).fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))
