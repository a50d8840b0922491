"""The self-report draft is read into its answer and the certainty stated with it; an
abstention stays an answer a gate reads as one, and a reply of no string reads empty."""

from __future__ import annotations

import pytest

from adaptive_gates.answering.self_report import SELF_REPORT_INSTRUCTION, SelfReport, read_self_report
from adaptive_gates.signals.draft import hedge


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


def test_the_request_follows_any_answer_instruction():
    from adaptive_gates.answering.self_report import SELF_REPORT_REQUEST, self_report_instruction

    assert self_report_instruction() == SELF_REPORT_INSTRUCTION
    assert self_report_instruction("Answer in German.") == "Answer in German." + SELF_REPORT_REQUEST


def test_a_records_certainty_is_read_strictly(outcome_records):
    from dataclasses import replace

    from adaptive_gates.answering.self_report import CERTAINTY_FIELD, recorded_certainty, self_report_features

    record = outcome_records[0]  # Llama's: asked plainly, no certainty recorded
    assert recorded_certainty(record) is None
    stated = [replace(record, extra={**record.extra, CERTAINTY_FIELD: c}) for c in ("certain", "uncertain", None)]
    assert [recorded_certainty(r) for r in stated] == ["certain", "uncertain", None]
    assert self_report_features([recorded_certainty(r) for r in stated]).tolist() == [[0, 1], [1, 0], [0, 0]]
    with pytest.raises(ValueError, match=rf"record {record.id!r}: field 'certainty_no_retrieval' .* got 'Certain'"):
        recorded_certainty(replace(record, extra={CERTAINTY_FIELD: "Certain"}))
