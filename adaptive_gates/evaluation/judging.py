"""How outcome records are judged in a report, and whose answers they hold.

A report grades each test question twice (without and with retrieval). Against gold
answers when every record has some; else by agreement (the answer over passages as
the reference, ``selfknowledge.agreement_records``), the only judge a user's own
questions without gold answers allow. A gate learns which questions *one* LLM gets
wrong, so a report also says when the records it is judged on come from another LLM
than the one it was fitted on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..gates.base.fitted_on import MODEL_FIELD, FittedOn, same_model
from ..records.data import OutcomeRecord
from ..records.selfknowledge import Labels, labelled_records, outcome_scores


class ModelMismatchWarning(UserWarning):
    """A gate is judged on the answers of another LLM than the one it was fitted on."""


def judged_by(records: Sequence[OutcomeRecord]) -> Labels:
    """``"gold"`` when every record has a gold answer, else ``"agreement"``."""
    return "gold" if all(r.answers for r in records) else "agreement"


def without_gold(records: Sequence[OutcomeRecord]) -> int:
    """How many records have no gold answer (``"answers": []``)."""
    return sum(not r.answers for r in records)


def graded_outcomes(records: Sequence[OutcomeRecord], metric: str, labels: Labels) -> tuple[np.ndarray, np.ndarray]:
    """Correctness without (``a``) and with (``b``) retrieval of each record, graded as
    ``labels`` says: against gold answers, or against the answer with retrieval."""
    return outcome_scores(labelled_records(records, labels), metric)


def records_model(records: Sequence[OutcomeRecord]) -> str | None:
    """The LLM whose answers the records hold (their ``llm`` field; several joined by
    ``" + "``, as ``FittedOn`` names them); ``None`` when no record says."""
    models = sorted({str(r.extra[MODEL_FIELD]) for r in records if r.extra.get(MODEL_FIELD)})
    return " + ".join(models) if models else None


def model_mismatch(fitted_on: FittedOn | None, records: Sequence[OutcomeRecord]) -> dict[str, Any] | None:
    """``{"fitted_on": model, "judged_on": model, "message": ...}`` when the gate was
    fitted on another LLM's outcomes than those of ``records``; ``None`` when they are
    the same model or either is not known."""
    fitted = None if fitted_on is None else fitted_on.model
    judged = records_model(records)
    if same_model(fitted, judged) is not False:
        return None
    return {
        "fitted_on": fitted,
        "judged_on": judged,
        "message": (
            f"the gate was fitted on outcomes of {fitted}, the test records hold answers of {judged}: "
            "a gate learns which questions one model gets wrong, and on another model's answers it can be "
            "no better than chance; fit it on this model's outcomes (adaptive-gates collect, then fit)"
        ),
    }
