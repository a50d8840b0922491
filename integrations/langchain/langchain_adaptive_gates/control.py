"""Per-request control of a gate through the runnable config's ``configurable``.

.. code-block:: python

    chain.invoke(q, config={"configurable": {"gate_threshold": 0.2}})   # stricter gate
    chain.invoke(q, config={"configurable": {"gate_retrieval": "always"}})  # force
    chain.invoke(q, config={"configurable": {"gate_name": "verbalized"}})   # pick a gate

There is no per-request target retrieval rate. A rate is a share of many decisions; one
request gets one decision, retrieve or not, and no threshold chosen for it alone can
make it "30% retrieval". A rate is set for traffic: calibrate the gate on questions
like the traffic's (``gate.calibrate(questions, target_rate=0.3)``). To serve requests
at different budgets, register copies calibrated to each rate as ``alternatives`` of
the ``GateRunnable`` and pick one per request with ``gate_name``; or give the
threshold such a calibration found as ``gate_threshold``. ``gate_target_rate`` is
refused with this advice rather than ignored.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from adaptive_gates import GateDecision

#: ``configurable`` key: a threshold replacing the gate's for this request.
THRESHOLD_KEY = "gate_threshold"
#: ``configurable`` key: ``"auto"`` (the gate decides), ``"always"`` or ``"never"``.
RETRIEVAL_KEY = "gate_retrieval"
#: ``configurable`` key: the name of a registered gate to decide with.
GATE_KEY = "gate_name"
#: Refused ``configurable`` key (see the module's doc: a rate needs many requests).
TARGET_RATE_KEY = "gate_target_rate"

RetrievalMode = Literal["auto", "always", "never"]
_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class RequestControl:
    """What one request asks of the gate."""

    threshold: float | None = None
    retrieval: RetrievalMode = "auto"
    gate_name: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> "RequestControl":
        """The control in ``config["configurable"]``; a bad value raises ``ValueError``
        naming the key."""
        configurable = (config or {}).get("configurable") or {}
        if TARGET_RATE_KEY in configurable:
            raise ValueError(
                f"configurable {TARGET_RATE_KEY!r} is not supported: a retrieval rate is a share of many requests, "
                "one request gets one decision; calibrate gates to rates (gate.calibrate(questions, target_rate=...)), "
                f"register them as alternatives and pick one with {GATE_KEY!r}, or give {THRESHOLD_KEY!r}"
            )
        threshold = configurable.get(THRESHOLD_KEY)
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold)
        ):
            raise ValueError(f"configurable {THRESHOLD_KEY!r} must be a finite number, got {threshold!r}")
        retrieval = configurable.get(RETRIEVAL_KEY, "auto")
        if retrieval not in _MODES:
            raise ValueError(f"configurable {RETRIEVAL_KEY!r} must be one of {_MODES}, got {retrieval!r}")
        gate_name = configurable.get(GATE_KEY)
        if gate_name is not None and not isinstance(gate_name, str):
            raise ValueError(f"configurable {GATE_KEY!r} must be a gate name (str), got {gate_name!r}")
        return cls(None if threshold is None else float(threshold), retrieval, gate_name)

    def forced(self, question: Any, gate_name: str) -> GateDecision:
        """The decision of a forced request: no scoring, the evidence says it was forced."""
        return GateDecision(
            retrieve=self.retrieval == "always",
            score=math.nan,
            threshold=math.nan,
            gate=gate_name,
            question=question if isinstance(question, str) else None,
            details={"forced": self.retrieval},
        )

    def apply_threshold(self, decision: GateDecision) -> GateDecision:
        """``decision`` re-taken at this request's threshold (score > threshold retrieves).

        A fallback keeps its verdict. A draft answer survives only where the gate
        itself gave one and the verdict stays "answer directly".
        """
        if self.threshold is None:
            return decision
        details = {**decision.details, "gate_threshold": decision.threshold}
        if decision.is_fallback:
            return dataclasses.replace(decision, threshold=self.threshold, details=details)
        retrieve = decision.score > self.threshold
        return dataclasses.replace(
            decision,
            retrieve=retrieve,
            threshold=self.threshold,
            details=details,
            draft_answer=None if retrieve else decision.draft_answer,
        )
