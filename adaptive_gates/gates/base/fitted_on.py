"""What a fitted gate learned from: the LLM whose outcomes it read, how many, labelled
how, and from which data.

A gate learns which questions *one* LLM gets wrong without passages, so the model its
outcome records came from is part of what it is: on another model's answers the same
weights can be no better than chance. ``Gate.fit_outcomes`` records a ``FittedOn`` and
``save`` writes it into ``config.json`` (``"fitted_on"``), so a loaded gate, a served
one and ``pretrained(...)`` can say whose outcomes they hold.

The model comes from the records' ``llm`` field, which ``adaptive-gates collect``
writes (the bundled AdaRAGUE records say ``meta-llama/Llama-3.1-8B-Instruct``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import GateLoadError
from ...records.data import OutcomeRecord
from ...records.selfknowledge import LABELS, Labels

#: The outcome record field naming the LLM whose answers the record holds.
MODEL_FIELD = "llm"


@dataclass(frozen=True)
class FittedOn:
    """The outcome records a gate was fitted on.

    ``model``: the LLM whose answers they hold (``None``: the records do not say; several
    models are joined by ``" + "``); ``records``: how many; ``labels``: ``"gold"`` (graded
    against gold answers) or ``"agreement"`` (the answer over passages as the reference);
    ``metric``: the answer metric; ``questions_sha256``: a digest of the records' ids and
    questions, so two gates can be told fitted on the same data; ``sources``: where the
    records came from (files, data sets), as the caller names them.
    """

    model: str | None
    records: int
    labels: Labels
    metric: str
    questions_sha256: str
    sources: tuple[str, ...] = field(default=())

    @classmethod
    def from_records(
        cls, records: Sequence[OutcomeRecord], metric: str, labels: Labels, sources: Sequence[str] = ()
    ) -> FittedOn:
        """The provenance of a fit on ``records``."""
        models = sorted({str(r.extra[MODEL_FIELD]) for r in records if r.extra.get(MODEL_FIELD)})
        digest = hashlib.sha256()
        for record in records:
            digest.update(f"{record.id}\x1f{record.question}\x1e".encode())
        return cls(
            model=" + ".join(models) if models else None,
            records=len(records),
            labels=labels,
            metric=metric,
            questions_sha256=digest.hexdigest(),
            sources=tuple(sources),
        )

    def with_sources(self, sources: Sequence[str]) -> FittedOn:
        """The same provenance naming where the records came from."""
        return replace(self, sources=tuple(sources))

    def describe(self) -> str:
        """One line for a person: whose outcomes, how many, labelled how."""
        model = self.model or "an unrecorded model"
        where = f" from {', '.join(self.sources)}" if self.sources else ""
        return f"{self.records} outcomes of {model} ({self.labels} labels, {self.metric}){where}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object saved as ``config.json``'s ``fitted_on``."""
        return {
            "model": self.model,
            "records": self.records,
            "labels": self.labels,
            "metric": self.metric,
            "questions_sha256": self.questions_sha256,
            "sources": list(self.sources),
        }

    @classmethod
    def from_dict(cls, where: str, value: Mapping[str, Any]) -> FittedOn:
        """Read back ``to_dict``'s object (``GateLoadError`` naming the bad field)."""

        def read(name: str, kind: type | tuple[type, ...]) -> Any:
            item = value.get(name)
            if not isinstance(item, kind) or isinstance(item, bool):
                raise GateLoadError(f"{where}: field 'fitted_on.{name}' is missing or malformed")
            return item

        model = value.get("model")
        if model is not None and not isinstance(model, str):
            raise GateLoadError(f"{where}: field 'fitted_on.model' must be a string or null")
        labels = read("labels", str)
        if labels not in LABELS:
            raise GateLoadError(f"{where}: field 'fitted_on.labels' must be one of {LABELS}")
        sources = read("sources", list)
        if not all(isinstance(s, str) for s in sources):
            raise GateLoadError(f"{where}: field 'fitted_on.sources' must be a list of strings")
        records = read("records", int)
        if records < 0:
            raise GateLoadError(f"{where}: field 'fitted_on.records' must be >= 0")
        return cls(model, records, labels, read("metric", str), read("questions_sha256", str), tuple(sources))


def model_name(model_id: str) -> str:
    """A model id as compared across backends: lower-case, without its organisation
    (``"meta-llama/Llama-3.1-8B-Instruct"`` and ``"llama-3.1-8b-instruct"`` are one model)."""
    return model_id.strip().rsplit("/", 1)[-1].lower()


def same_model(fitted: str | None, serving: str | None) -> bool | None:
    """Whether the model a gate was fitted on is the one it now serves; ``None`` when
    either is unknown."""
    if not fitted or not serving:
        return None
    return model_name(fitted) == model_name(serving)
