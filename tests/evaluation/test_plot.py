"""Accuracy-against-retrieval-rate plots, and how plots are written."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.evaluation.plot import check_plot_path, plot_reports, save_figure
from adaptive_gates.evaluation.report import evaluate_scores
from adaptive_gates.gates import BM25DifficultyGate
from adaptive_gates.records.selfknowledge import outcome_scores

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def reports(outcome_records):
    train, test = outcome_records[:100], outcome_records[100:180]
    a, b = outcome_scores(test, "contains")
    gate = BM25DifficultyGate().fit_outcomes(train)
    scores = gate.score_records(test)
    with_band = evaluate_scores(scores, a, b, gate=gate.name, metric="contains", retrieve=gate.retrieves(scores))
    oracle = evaluate_scores(b - a, a, b, gate="oracle-scores", metric="contains")
    return [with_band, oracle]


def test_plot_paths_need_a_format_suffix(tmp_path):
    for name in ("curve.png", "curve.PDF", "curve.svg"):
        check_plot_path(tmp_path / name)
    for name in ("curve", "curve.txt", "curve.jsonl"):
        with pytest.raises(ValueError, match="not a plot format matplotlib writes"):
            check_plot_path(tmp_path / name)


def test_reports_are_plotted_in_the_format_the_suffix_names(reports, tmp_path):
    png = plot_reports(reports, tmp_path / "curves.png", title="two gates")
    assert png == tmp_path / "curves.png" and png.read_bytes().startswith(PNG)
    svg = plot_reports(reports[1:], tmp_path / "oracle.svg")
    assert b"<svg" in svg.read_bytes()[:500]
    pdf = plot_reports(reports[:1], tmp_path / "one.pdf")
    assert pdf.read_bytes().startswith(b"%PDF")


def test_nothing_to_plot_or_a_bad_suffix_writes_nothing(reports, tmp_path):
    with pytest.raises(ValueError, match="no reports given"):
        plot_reports([], tmp_path / "none.png")
    with pytest.raises(ValueError, match="not a plot format"):
        plot_reports(reports, tmp_path / "curves.data")
    assert list(tmp_path.iterdir()) == []


def test_save_figure_replaces_a_plot_whole(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = tmp_path / "fig.png"
    path.write_bytes(b"old plot")
    fig, ax = plt.subplots()
    ax.plot(np.arange(3), np.arange(3))
    assert save_figure(fig, path) == path
    assert path.read_bytes().startswith(PNG)
    assert not plt.fignum_exists(fig.number)  # closed
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]  # no temporary file left
