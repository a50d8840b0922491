"""The plot of a learning curve."""

from __future__ import annotations

import pytest

from adaptive_gates.evaluation.learning_curve import LearningCurve, LearningPoint, learning_curve
from adaptive_gates.evaluation.learning_plot import plot_learning_curve
from adaptive_gates.gates import BM25DifficultyGate


@pytest.fixture(scope="module")
def curve(outcome_records):
    return learning_curve(
        BM25DifficultyGate, outcome_records[:80], name="bm25-difficulty", sizes=[20, 40, 80], folds=2, seeds=(0, 1)
    )


def test_a_real_learning_curve_is_plotted(curve, tmp_path):
    assert [p.size for p in curve.points] == [20, 40, 80]
    path = plot_learning_curve(curve, tmp_path / "learning.png")
    assert path.read_bytes().startswith(b"\x89PNG")
    svg = plot_learning_curve(curve, tmp_path / "learning.svg", title="BM25 difficulty")
    text = svg.read_text()
    assert "BM25 difficulty" in text
    assert "mean ± sd over 2 seeds" in text


def test_a_curve_without_any_gap_capture_is_refused(tmp_path):
    empty = LearningCurve("g", "contains", "gold", "gold", 2, (0,), (LearningPoint(20, (), None),))
    with pytest.raises(ValueError, match="no size of the learning curve has a gap capture"):
        plot_learning_curve(empty, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_a_bad_suffix_is_refused_before_plotting(curve, tmp_path):
    with pytest.raises(ValueError, match="not a plot format"):
        plot_learning_curve(curve, tmp_path / "learning")
