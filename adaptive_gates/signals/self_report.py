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

from dataclasses import dataclass

from ..answering import DEFAULT_INSTRUCTION
from .certainty import CERTAIN, UNCERTAIN, parse_certainty

#: The draft instruction: a few words or "unknown", then "certain" or "uncertain".
SELF_REPORT_INSTRUCTION = (
    DEFAULT_INSTRUCTION + ' If you do not know, say "unknown".'
    ' If you are sure the answer is accurate and correct, please say "certain" after the answer.'
    ' If you are not confident with the answer, please say "uncertain".'
)
#: The outcome record field holding the certainty stated with the answer without
#: retrieval (``"certain"``, ``"uncertain"``, or ``null`` when none was stated).
CERTAINTY_FIELD = "certainty_no_retrieval"


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
