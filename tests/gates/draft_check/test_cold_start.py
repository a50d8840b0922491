"""The cold start's fixed rule: an abstention or stated doubt retrieves, stated
certainty or silence does not, whatever the draft's words otherwise."""

from __future__ import annotations

import pytest

from adaptive_gates.answering.self_report import read_self_report
from adaptive_gates.gates.draft_check.cold_start import COLD_START_THRESHOLD, cold_start_reading, cold_start_scores


@pytest.mark.parametrize(
    ("reply", "score", "reason"),
    [
        ("", 1.0, "cold start: the draft is empty"),
        ("I don't know", 1.0, "cold start: the draft is empty"),  # a refusal leaves no answer
        ("unknown", 1.0, "cold start: the draft is a hedge ('unknown')"),
        ("Not available, certain", 1.0, "cold start: the draft is a hedge ('Not available')"),
        ("Paris. Uncertain.", 0.75, "cold start: the model says it is uncertain"),
        ("1954", 0.5, "cold start: the model states no certainty"),
        ("Elton John (certain)", 0.0, "cold start: the model says it is certain"),
        ("Paris\ncertain", 0.0, "cold start: the model says it is certain"),  # stated on the next line
    ],
)
def test_a_self_report_reply_is_scored_by_what_the_model_says_about_itself(reply, score, reason):
    report = read_self_report(reply)
    reading = cold_start_reading(report.answer, report.certainty)
    assert (reading.score, reading.reason) == (score, reason)
    assert (reading.score > COLD_START_THRESHOLD) == (score >= 0.75)


def test_scores_of_a_batch_and_bad_input():
    assert cold_start_scores(["Paris", "unknown", None], ["certain", None, None]).tolist() == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="got 2 drafts and 1 certainties"):
        cold_start_scores(["a", "b"], [None])
