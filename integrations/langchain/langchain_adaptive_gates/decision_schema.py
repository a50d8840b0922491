"""The schema of a ``GateDecision`` as it travels in JSON (``GateDecision.to_dict``),
for the output schemas that schema-driven servers validate answers against."""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from adaptive_gates import GateDecision

#: The fields ``to_dict`` writes as ``None`` when not finite (a forced or fallback decision).
_NULLABLE = ("score", "threshold")


@functools.cache
def decision_json_model() -> type[BaseModel]:
    """``GateDecision``'s fields as a pydantic model, ``score`` and ``threshold`` also
    ``null`` (JSON has no NaN); it validates a decision's dict and the decision itself."""
    hints = typing.get_type_hints(GateDecision)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(GateDecision):
        hint = hints[field.name]
        if field.name in _NULLABLE:
            hint = typing.Annotated[
                hint | None, Field(description="null when not finite: a forced or fallback decision")
            ]
        if field.default is not dataclasses.MISSING:
            fields[field.name] = (hint, field.default)
        elif field.default_factory is not dataclasses.MISSING:
            fields[field.name] = (hint, Field(default_factory=field.default_factory))
        else:
            fields[field.name] = (hint, ...)
    model: type[BaseModel] = create_model(
        "GateDecision", __doc__=GateDecision.__doc__, __config__=ConfigDict(from_attributes=True), **fields
    )
    return model
