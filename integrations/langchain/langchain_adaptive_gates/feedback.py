"""Teaching a gate from the answers of LangChain runs.

Each decision goes out as the custom event ``DECISION_EVENT`` inside the run that
asked the gate (a router, a ``GateRunnable``, a ``GatedRetriever``, a graph node).
``GateFeedback`` is a callback handler that keeps the last decision of each top-level
call, keyed by the call's run id; once the answer is judged, ``record(run_id,
correct)`` hands the decision and the verdict to the gate
(``Gate.record_decision_feedback``), so the gates that learn online (the SKR gates, a
stacked gate's log, a budget's or cascade's members) decide later questions from it::

    feedback = GateFeedback(gate)
    run_id = uuid.uuid4()
    answer = chain.invoke(question, {"callbacks": [feedback], "run_id": run_id})
    feedback.record(run_id, correct=judge(answer))

A run id names a top-level call: ``invoke``'s own, or each input's in ``batch``
(``config=[{"run_id": ...}, ...]``). The handler is a plain ``BaseCallbackHandler``, so
it serves sync and async calls alike, and LangChain logs (does not raise) anything it
might throw while the chain runs.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import Feedback

from .gate_runnable import DECISION_EVENT

logger = logging.getLogger(__name__)


class GateFeedback(BaseCallbackHandler):
    """Keeps each call's gate decision until its answer is judged, then teaches the gate.

    Args:
        gate: the gate to teach (it must learn online for ``record`` to succeed; the
            handler still collects decisions for any gate).
        max_runs: calls remembered (decisions and run ancestry); the oldest go first.
    """

    def __init__(self, gate: Gate, *, max_runs: int = 10_000) -> None:
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise ValueError(f"max_runs must be a positive int, got {max_runs!r}")
        self.gate = gate
        self.max_runs = max_runs
        self._parents: OrderedDict[UUID, UUID | None] = OrderedDict()
        self._decisions: OrderedDict[UUID, GateDecision] = OrderedDict()
        self._lock = threading.Lock()

    # --------------------------------------------------------- what the runs report
    def _started(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        with self._lock:
            self._parents[run_id] = parent_run_id
            # a call's runs are many: keep the ancestry of about max_runs calls
            while len(self._parents) > 32 * self.max_runs:
                self._parents.popitem(last=False)

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._started(run_id, parent_run_id)

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._started(run_id, parent_run_id)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if name != DECISION_EVENT:
            return
        decision = GateDecision.from_dict(data)
        with self._lock:
            root = self._root(run_id)
            self._decisions[root] = decision
            self._decisions.move_to_end(root)
            while len(self._decisions) > self.max_runs:
                self._decisions.popitem(last=False)

    def _root(self, run_id: UUID) -> UUID:
        seen = set()
        while (parent := self._parents.get(run_id)) is not None and run_id not in seen:
            seen.add(run_id)
            run_id = parent
        return run_id

    # ------------------------------------------------------------------ the caller's
    def decision(self, run_id: UUID) -> GateDecision | None:
        """The last gate decision of the call ``run_id`` (``None``: no decision seen,
        or already recorded)."""
        with self._lock:
            return self._decisions.get(run_id)

    def record(self, run_id: UUID, correct: bool) -> Feedback:
        """Teach the gate the verdict on the answer of the call ``run_id``; its
        decision is then forgotten, so one answer teaches once.

        Raises:
            KeyError: no decision of that call is held (wrong id, a call that made
                none, one already recorded, or one older than ``max_runs`` calls).
            FeedbackNotSupportedError: the gate does not learn from feedback.
        """
        with self._lock:
            decision = self._decisions.pop(run_id, None)
        if decision is None:
            raise KeyError(
                f"no gate decision is held for run {run_id}: pass this handler in the call's callbacks "
                "and its run_id (a top-level call's), and record each call once"
            )
        try:
            entry = self.gate.record_decision_feedback(decision, correct)
        except Exception:
            with self._lock:  # nothing was learned: the caller may try again
                self._decisions[run_id] = decision
            raise
        logger.debug("run %s taught %s: %s", run_id, self.gate.name, entry)
        return entry


__all__ = ["GateFeedback"]
