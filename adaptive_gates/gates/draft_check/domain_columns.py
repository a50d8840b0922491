"""A domain indicator as combiner columns: which data set, task or product area a
question comes from, one-hot.

Measured on the bundled outcomes (``benchmarks/draft_check_inputs.py``), a task
indicator lets a gate fitted on several tasks at once learn how much each task gains
from retrieval on the whole, on top of what the question and the draft say. At fit,
each outcome record's domain is a field of the record (``record.extra[field]``, e.g.
``"task"``); at decision time it comes from the deployment (one domain for the
gate's traffic), since a live question carries no such field.

The columns are ``domain=<name>`` for each domain seen in fitting (sorted) and
``domain=other``: a record without the field, and a decision in a domain never seen in
fitting, read as ``other``. The saved gate keeps the names of its domains; a load
refuses a malformed list, naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import GateLoadError
from ...records.data import OutcomeRecord

#: The column of a domain not seen in fitting, or of none.
OTHER = "other"
#: How a column names its domain.
PREFIX = "domain="


def record_domain(record: OutcomeRecord, field: str) -> str | None:
    """The record's domain: its ``field`` as text (``None``: the record has none)."""
    value = record.extra.get(field)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


@dataclass(frozen=True)
class DomainColumns:
    """The domains a gate was fitted on (sorted, ``other`` not among them)."""

    known: tuple[str, ...]

    @classmethod
    def fitted(cls, values: Iterable[str | None]) -> DomainColumns:
        """The columns of the domains among ``values`` (``None``: no domain)."""
        return cls(tuple(sorted({v for v in values if v is not None and v != OTHER})))

    @property
    def names(self) -> tuple[str, ...]:
        """The column names: ``domain=<name>`` per known domain, then ``domain=other``."""
        return (*(PREFIX + d for d in self.known), PREFIX + OTHER)

    def reads(self, value: str | None) -> str:
        """The column a domain is read as: itself if known, else ``other``."""
        return value if value is not None and value in self.known else OTHER

    def rows(self, values: Sequence[str | None]) -> np.ndarray:
        """One one-hot row per value (columns ``names``)."""
        index = {d: i for i, d in enumerate(self.known)}
        out = np.zeros((len(values), len(self.known) + 1), dtype=np.float64)
        for i, value in enumerate(values):
            out[i, index.get(self.reads(value), len(self.known))] = 1.0
        return out

    def to_state(self) -> list[str]:
        """The JSON list a gate saves (``state.domains``)."""
        return list(self.known)

    @classmethod
    def from_state(cls, directory: Path, value: Any, field: str | None) -> DomainColumns | None:
        """The columns a gate saved (``state.domains``), for a gate whose ``domain_field``
        is ``field``: ``None`` for a gate fitted without domains. Refuses, naming the
        field, a list that is not of distinct non-empty names (``other`` not among them),
        or a list where the parameters say there is none (or none where they say one)."""
        if field is None:
            if value is not None:
                raise GateLoadError(f"{directory}: field 'state.domains' is set, but 'params.domain_field' is null")
            return None
        if not isinstance(value, list) or not all(isinstance(d, str) and d.strip() for d in value):
            raise GateLoadError(
                f"{directory}: field 'state.domains' must list the domains fitted on (non-empty names), got {value!r}"
            )
        if len(set(value)) != len(value) or OTHER in value or value != sorted(value):
            raise GateLoadError(
                f"{directory}: field 'state.domains' must list distinct domains in sorted order, without "
                f"{OTHER!r}, got {value!r}"
            )
        return cls(tuple(value))
