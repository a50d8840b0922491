"""The self-report draft is read into its answer and the certainty stated with it; an
abstention stays an answer a gate reads as one, and a reply of no string reads empty."""

from __future__ import annotations

import pytest

from adaptive_gates.signals.draft import hedge
from adaptive_gates.signals.self_report import SELF_REPORT_INSTRUCTION, SelfReport, read_self_report


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Paris, certain", SelfReport("Paris", "certain")),
        ("Paris. Uncertain.", SelfReport("Paris", "uncertain")),
        ("Elton John (certain)", SelfReport("Elton John", "certain")),
        ("1954", SelfReport("1954", None)),
        ("I don't know", SelfReport("", "uncertain")),
        (None, SelfReport("", None)),
    ],
)
def test_a_self_report_reply_is_read_into_its_answer_and_certainty(reply, expected):
    assert read_self_report(reply) == expected


def test_an_abstention_is_kept_as_the_answer_a_gate_reads_as_a_hedge():
    report = read_self_report("unknown")
    assert report == SelfReport("unknown", None) and hedge(report.answer) == "unknown"


def test_the_instruction_asks_for_a_short_answer_an_abstention_and_the_certainty():
    assert SELF_REPORT_INSTRUCTION.startswith("Answer the following question with one or few words.")
    for asked in ('say "unknown"', 'say "certain"', 'say "uncertain"'):
        assert asked in SELF_REPORT_INSTRUCTION
