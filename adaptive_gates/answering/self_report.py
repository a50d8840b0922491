"""What the model says about itself with its draft: a short answer or an abstention,
and its certainty, asked for in one call.

Weights fitted on one model's outcomes do not travel to another model; what the
model says about itself does (measured on another LLM's answers to 500 NQ questions:
its stated uncertainty alone about +0.19 of the oracle gap, an abstention about +0.23,
where gates fitted on Llama-3.1-8B's outcomes were at chance). So the self-report
draft prompt is the answerer's instruction, an invitation to abstain, and the
verbalized gate's certainty request (When-to-Retrieve, SPEC §3); the reply is read by
``parse_certainty``: the answer without its marker, and the certainty stated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..signals.certainty import CERTAIN, UNCERTAIN, parse_certainty
from .answerer import DEFAULT_INSTRUCTION

if TYPE_CHECKING:
    from ..records.data import OutcomeRecord

#: What the self-report adds to an answer instruction: an invitation to abstain, then
#: the verbalized gate's certainty request.
SELF_REPORT_REQUEST = (
    ' If you do not know, say "unknown".'
    ' If you are sure the answer is accurate and correct, please say "certain" after the answer.'
    ' If you are not confident with the answer, please say "uncertain".'
)
#: The draft instruction: a few words or "unknown", then "certain" or "uncertain".
SELF_REPORT_INSTRUCTION = DEFAULT_INSTRUCTION + SELF_REPORT_REQUEST
#: The outcome record field holding the certainty stated with the answer without
#: retrieval (``"certain"``, ``"uncertain"``, or ``null`` when none was stated).
CERTAINTY_FIELD = "certainty_no_retrieval"
#: The columns a combiner reads from the stated certainty (both 0: none stated).
SELF_REPORT_FEATURE_NAMES: tuple[str, ...] = ("self_uncertain", "self_certain")


def self_report_instruction(instruction: str = DEFAULT_INSTRUCTION) -> str:
    """``instruction`` (an answerer's first line) with the self-report request after it."""
    return instruction + SELF_REPORT_REQUEST


@dataclass(frozen=True)
class SelfReport:
    """A self-report reply read: ``answer`` without its certainty marker, and the
    ``certainty`` stated (``"certain"``, ``"uncertain"``, or ``None``)."""

    answer: str
    certainty: str | None


def read_self_report(reply: str) -> SelfReport:
    """The answer and the stated certainty of a self-report reply (a non-string reply
    reads as an empty answer with no certainty)."""
    if not isinstance(reply, str):
        return SelfReport("", None)
    parse = parse_certainty(reply)
    certainty = parse.certainty if parse.certainty in (CERTAIN, UNCERTAIN) else None
    return SelfReport(parse.answer, certainty)


def recorded_certainty(record: OutcomeRecord) -> str | None:
    """The certainty an outcome record says was stated with its answer without
    retrieval (``CERTAINTY_FIELD``): ``"certain"``, ``"uncertain"``, or ``None`` when
    the record holds none (a plain draft, or nothing stated). Any other value is a
    ``ValueError`` naming the record: a misspelt certainty must not read as none."""
    value = record.extra.get(CERTAINTY_FIELD)
    if value is None or value in (CERTAIN, UNCERTAIN):
        return value
    raise ValueError(
        f"record {record.id!r}: field {CERTAINTY_FIELD!r} must be {CERTAIN!r}, {UNCERTAIN!r} or null, got {value!r}"
    )


def self_report_features(certainties: Sequence[str | None]) -> np.ndarray:
    """The ``SELF_REPORT_FEATURE_NAMES`` columns of each stated certainty (one row each)."""
    rows = [(float(c == UNCERTAIN), float(c == CERTAIN)) for c in certainties]
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(SELF_REPORT_FEATURE_NAMES))
