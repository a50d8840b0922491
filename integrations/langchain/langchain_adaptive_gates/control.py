"""Per-request control of a gate through the runnable config's ``configurable``.

.. code-block:: python

    chain.invoke(q, config={"configurable": {"gate_threshold": 0.2}})   # stricter gate
    chain.invoke(q, config={"configurable": {"gate_retrieval": "always"}})  # force
    chain.invoke(q, config={"configurable": {"gate_name": "verbalized"}})   # pick a gate
    chain.invoke(q, config={"configurable": {"gate_target_rate": 0.1}})     # a tighter budget

A target retrieval rate is a share of many decisions; one request gets one decision. So
``gate_target_rate`` means: judge this request at the threshold that would have
retrieved that share of the questions the gate was calibrated on
(``Gate.threshold_at_rate``). The gate must be calibrated
(``gate.calibrate(questions, ...)``, on questions like the traffic's); an uncalibrated
gate makes the request fail with that advice. Give a threshold or a target rate, not
both. To hold a realised rate over live traffic, wrap the gate in ``BudgetedGate``.

The keys are declared to LangChain (``control_specs``), so a runnable's
``config_specs`` and ``config_schema()`` list them. The ``gate_`` prefix belongs to
these keys: any other ``configurable`` key starting with it is refused as a misspelling;
keys without it belong to other runnables and are left alone.

A schema validates a config before the runnable sees it (LangServe validates each
request's config with the served runnable's ``config_schema()`` and drops what the
schema does not declare), so the package's runnables publish a schema that refuses
what would otherwise vanish there (``refusing_unknown_keys``): its ``configurable``
forbids keys that no part of the runnable declares (``additionalProperties: false``),
and a misspelt ``gate_`` key fails validation with the same did-you-mean. Served with
LangServe, such a request is answered with HTTP 422 naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from langchain_core.runnables import ConfigurableFieldSpec
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import RetrievalMode, check_retrieval_mode

#: ``configurable`` key: a threshold replacing the gate's for this request.
THRESHOLD_KEY = "gate_threshold"
#: ``configurable`` key: ``"auto"`` (the gate decides), ``"always"`` or ``"never"``.
RETRIEVAL_KEY = "gate_retrieval"
#: ``configurable`` key: the name of a registered gate to decide with.
GATE_KEY = "gate_name"
#: ``configurable`` key: a retrieval rate in [0, 1], judged at the threshold that would
#: have retrieved that share of the gate's calibration questions.
TARGET_RATE_KEY = "gate_target_rate"
#: Every control key; any other ``configurable`` key starting with ``KEY_PREFIX`` is refused.
CONTROL_KEYS = (THRESHOLD_KEY, RETRIEVAL_KEY, GATE_KEY, TARGET_RATE_KEY)
#: The prefix the control keys own in ``configurable``.
KEY_PREFIX = "gate_"


# Built once: LangChain merges a chain's specs by equality, and two pydantic Field()s
# are equal only when they are the same object.
_THRESHOLD_SPEC = ConfigurableFieldSpec(
    id=THRESHOLD_KEY,
    annotation=Annotated[float, Field(allow_inf_nan=False)] | None,
    name="Gate threshold",
    description="A threshold replacing the gate's for this request (need score above it: retrieve); "
    f"null keeps the gate's own. Not with {TARGET_RATE_KEY}.",
    default=None,
)
_RETRIEVAL_SPEC = ConfigurableFieldSpec(
    id=RETRIEVAL_KEY,
    annotation=RetrievalMode,
    name="Retrieval",
    description="'auto': the gate decides; 'always' or 'never': the request forces it.",
    default="auto",
)
_TARGET_RATE_SPEC = ConfigurableFieldSpec(
    id=TARGET_RATE_KEY,
    annotation=Annotated[float, Field(ge=0.0, le=1.0)] | None,
    name="Target retrieval rate",
    description="Judge at the threshold that would have retrieved this share of the questions the gate "
    f"was calibrated on; null: no target. Not with {THRESHOLD_KEY}.",
    default=None,
)


def control_specs(gate_names: Sequence[str], default_gate: str) -> list[ConfigurableFieldSpec]:
    """The control keys as LangChain declares configurable fields, for the
    ``config_specs`` of a runnable that reads them: ``gate_names`` are the gates a
    request may pick, ``default_gate`` the one deciding when it picks none."""
    if default_gate not in gate_names:
        raise ValueError(f"the default gate {default_gate!r} is not one of {list(gate_names)}")
    gate_spec = ConfigurableFieldSpec(
        id=GATE_KEY,
        # Literal of names known only now; Literal[("a", "b")] is Literal["a", "b"]
        annotation=Literal[tuple(sorted(gate_names))],
        name="Gate",
        description="The registered gate that decides this request.",
        default=default_gate,
    )
    return [_THRESHOLD_SPEC, _RETRIEVAL_SPEC, gate_spec, _TARGET_RATE_SPEC]


@dataclass(frozen=True)
class RequestControl:
    """What one request asks of the gate."""

    threshold: float | None = None
    retrieval: RetrievalMode = "auto"
    gate_name: str | None = None
    target_rate: float | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> RequestControl:
        """The control in ``config["configurable"]``; a bad value raises ``ValueError``
        naming the key, and so does an unknown key with the ``gate_`` prefix."""
        configurable = (config or {}).get("configurable") or {}
        _check_keys(configurable)
        threshold = configurable.get(THRESHOLD_KEY)
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold)
        ):
            raise ValueError(f"configurable {THRESHOLD_KEY!r} must be a finite number, got {threshold!r}")
        retrieval = check_retrieval_mode(configurable.get(RETRIEVAL_KEY, "auto"), f"configurable {RETRIEVAL_KEY!r}")
        gate_name = configurable.get(GATE_KEY)
        if gate_name is not None and not isinstance(gate_name, str):
            raise ValueError(f"configurable {GATE_KEY!r} must be a gate name (str), got {gate_name!r}")
        target = configurable.get(TARGET_RATE_KEY)
        if target is not None and (
            isinstance(target, bool) or not isinstance(target, (int, float)) or not 0.0 <= target <= 1.0
        ):
            raise ValueError(f"configurable {TARGET_RATE_KEY!r} must be a number in [0, 1], got {target!r}")
        if target is not None and threshold is not None:
            raise ValueError(f"give configurable {THRESHOLD_KEY!r} or {TARGET_RATE_KEY!r}, not both")
        return cls(
            None if threshold is None else float(threshold),
            retrieval,
            gate_name,
            None if target is None else float(target),
        )

    def for_gate(self, gate: Gate) -> RequestControl:
        """This control with a target rate turned into ``gate``'s threshold for it
        (``ValueError`` when the gate is not calibrated)."""
        if self.target_rate is None:
            return self
        return dataclasses.replace(self, threshold=gate.threshold_at_rate(self.target_rate))

    def forced(self, question: Any, gate_name: str) -> GateDecision:
        """The decision of a forced request: no scoring, the evidence says it was forced."""
        return GateDecision.forced(question, gate_name, self.retrieval)

    def apply_threshold(self, decision: GateDecision, gate: Gate) -> GateDecision:
        """``decision`` re-taken at this request's threshold by ``gate``'s own rule
        (``Gate.retaken_at``), the gate's own threshold kept in the evidence."""
        if self.threshold is None:
            return decision
        details = {**decision.details, "gate_threshold": decision.threshold}
        if self.target_rate is not None:
            details["gate_target_rate"] = self.target_rate
        return dataclasses.replace(gate.retaken_at(decision, self.threshold), details=details)


def refusing_unknown_keys(schema: type[BaseModel]) -> type[BaseModel]:
    """``schema`` (a runnable's ``config_schema()``) whose ``configurable`` refuses keys
    it does not declare: a misspelt ``gate_`` key with the did-you-mean of
    ``RequestControl.from_config``, any other with pydantic's ``extra_forbidden``.
    ``configurable`` is declared as ``Configurable | None``: LangServe copies, for each
    served path, the fields of the config model that are models (keeping their
    configuration, not their validators) and keeps any other annotation as it is, so
    the union reaches it whole and the client reads the did-you-mean."""
    field = schema.model_fields.get("configurable")
    declared = field.annotation if field is not None else None
    if not (isinstance(declared, type) and issubclass(declared, BaseModel)):
        return schema

    class Configurable(declared):  # type: ignore[valid-type, misc]  # a model built at run time
        model_config = ConfigDict(extra="forbid")

        @model_validator(mode="before")
        @classmethod
        def _known_gate_keys(cls, data: Any) -> Any:
            if isinstance(data, Mapping):
                _check_keys(data)
            return data

    Configurable.__name__ = Configurable.__qualname__ = declared.__name__
    Configurable.__doc__ = declared.__doc__
    return create_model(schema.__name__, __base__=schema, configurable=(Configurable | None, None))


def _check_keys(configurable: Mapping[str, Any]) -> None:
    """``ValueError`` for a key with the control keys' prefix that is none of them: a
    misspelt control key would otherwise be ignored without a word."""
    for key in configurable:
        if isinstance(key, str) and key.startswith(KEY_PREFIX) and key not in CONTROL_KEYS:
            close = difflib.get_close_matches(key, CONTROL_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown configurable key {key!r}{hint} (the gate's keys: {', '.join(CONTROL_KEYS)})")
