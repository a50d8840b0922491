"""``HoldsCombiner``: a gate that decides through a fitted feature combiner shows it as
``combiner_`` once fitted, and says it is not fitted before (the stacked gate here, on
real outcome records with the real MiniLM)."""

from __future__ import annotations

import pytest

from adaptive_gates import DraftCheckGate, StackedGate
from adaptive_gates.errors import NotFittedError
from adaptive_gates.gates.combiner import FeatureCombiner
from adaptive_gates.gates.combiner.held import HoldsCombiner


def test_the_combining_gates_hold_their_combiner_this_way() -> None:
    assert issubclass(StackedGate, HoldsCombiner) and issubclass(DraftCheckGate, HoldsCombiner)


def test_before_a_fit_the_combiner_is_refused_naming_the_fit(cached_embedder) -> None:
    gate = StackedGate(cached_embedder, members="popularity")
    with pytest.raises(NotFittedError, match=r"fit_outcomes"):
        _ = gate.combiner_


def test_after_a_fit_the_combiner_is_the_one_that_scores(cached_embedder, outcome_records) -> None:
    gate = StackedGate(cached_embedder, members="popularity", folds=3).fit_outcomes(outcome_records[:120])
    combiner = gate.combiner_
    assert isinstance(combiner, FeatureCombiner) and gate.combiner_ is combiner
    assert combiner.feature_names and len(combiner.feature_names) >= 1
