"""The selection's reason: a readable sentence and the gate's decision as JSON, and
``decision_of`` to read the decision back.

``RouterQueryEngine`` keeps the ``SelectorResult`` in ``response.metadata
["selector_result"]``, and the adaptive engines put the decision's dict in
``response.metadata["gate_decision"]``; either way a caller reads the decision behind
an answer with ``decision_of(response)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llama_index.core.base.base_selector import MultiSelection, SingleSelection

from adaptive_gates import GateDecision
from adaptive_gates.extend import DRAFT

#: Starts the reason's last line; the rest of that line is ``GateDecision.to_dict`` as JSON.
DECISION_PREFIX = "gate decision: "
#: Where ``RouterQueryEngine`` puts the selector's result in a response's metadata.
METADATA_KEY = "selector_result"
#: Where the adaptive query and chat engines put the decision (``GateDecision.to_dict()``).
DECISION_METADATA_KEY = "gate_decision"


def selection_reason(route: str, decision: GateDecision, payload: dict[str, Any] | None = None) -> str:
    """The reason of a selection: what was chosen and why, then the decision as JSON
    (one line: ``json.dumps`` escapes any newline of the question). ``payload`` is
    ``decision.to_dict()`` when the caller already made it."""
    if decision.is_fallback:
        why = f"{decision.gate} fell back to {'retrieval' if decision.retrieve else 'no retrieval'} ({decision.error})"
    else:
        comparison = ">" if decision.retrieve else "<="
        why = f"{decision.gate} scored {decision.score:.4g} {comparison} threshold {decision.threshold:.4g}"
        if decision.route == DRAFT:
            why += " and drafted an answer"
    return f"{route}: {why}\n{DECISION_PREFIX}{json.dumps(decision.to_dict() if payload is None else payload)}"


def decision_of(source: Any) -> GateDecision | None:
    """The gate decision carried by a selection's reason.

    Args:
        source: a query or chat response (its ``metadata``), a response's metadata
            dict, a ``SelectorResult`` / ``MultiSelection``, a ``SingleSelection`` or
            the reason string itself.

    Returns:
        The decision (a non-finite score or threshold comes back as NaN), or ``None``
        when no gate made the selection or answered the query.

    Raises:
        ValueError: the reason has the decision line but its JSON is not a decision,
            or the metadata's decision is not one.
    """
    metadata = _metadata(source)
    if metadata.get(DECISION_METADATA_KEY) is not None:
        return GateDecision.from_dict(metadata[DECISION_METADATA_KEY])
    for reason in _reasons(source):
        _, found, payload = reason.rpartition("\n" + DECISION_PREFIX)
        if found:
            return _decision(payload)
    return None


def _reasons(source: Any) -> list[str]:
    if isinstance(source, str):
        return [source]
    if isinstance(source, SingleSelection):
        return [source.reason]
    if isinstance(source, MultiSelection):
        return source.reasons
    metadata = _metadata(source)
    if metadata.get(METADATA_KEY) is not None:
        return _reasons(metadata[METADATA_KEY])
    return []


def _metadata(source: Any) -> Mapping[str, Any]:
    """``source`` itself when it is a metadata dict, else its ``metadata`` (empty: none)."""
    metadata = source if isinstance(source, Mapping) else getattr(source, "metadata", None)
    return metadata if isinstance(metadata, Mapping) else {}


def _decision(payload: str) -> GateDecision:
    try:
        return GateDecision.from_dict(json.loads(payload))
    except ValueError as exc:
        raise ValueError(f"the selection's {DECISION_PREFIX.strip()!r} line is not a GateDecision: {exc}") from None


__all__ = ["DECISION_METADATA_KEY", "DECISION_PREFIX", "METADATA_KEY", "decision_of", "selection_reason"]
