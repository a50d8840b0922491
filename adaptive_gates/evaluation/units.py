"""A gate's figures in the units the field compares (SPEC §6, as in AdaRAGUE).

At the gate's decisions: accuracy (``in_accuracy``), retrieval calls and LM calls per
question; over its curve, the retrieval calls it needs to match always-retrieve;
and the band of random gates on the same outcomes, without which a figure on a few
hundred questions cannot be read. Offline and live reports and the demo all take
their units from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .curves import Curve, as_outcomes
from .random_band import random_band

#: Slack when comparing an accuracy on the curve with always-retrieve's: both are sums
#: of the same 0/1 (or graded) outcomes divided by N, computed in different orders.
_MATCH_TOLERANCE = 1e-9


def calls_to_match_always(curve: Curve, always: float) -> float:
    """The smallest retrieval rate on ``curve`` whose accuracy reaches ``always``
    (always-retrieve's accuracy): retrieval calls per question the gate needs to be
    as accurate as retrieving every time.

    0.0 when never-retrieve is already as good. The curve ends at always-retrieve
    (rate 1), so it is always reached there: a gate that gets there no sooner, the
    "unreachable" case, needs 1.0, every call always-retrieve makes.
    """
    reached = np.flatnonzero(curve.accuracy >= always - _MATCH_TOLERANCE)
    return float(curve.rates[reached[0]]) if reached.size else 1.0


def lm_calls_per_decision(
    retrieve: np.ndarray,
    *,
    answers_first: bool = False,
    gate_calls: Sequence[float] | None = None,
    drafts: Sequence[bool] | None = None,
) -> np.ndarray:
    """LM calls each question costs at the gate's decisions: the calls the gate made
    to decide, plus the answer: one call with the passages when it retrieves, and one
    without them unless the gate's own draft is that answer.

    Args:
        retrieve: the gate's decisions.
        answers_first: the gate asks the LLM before deciding (one call, whose draft
            is the answer when it does not retrieve): the defaults of the next two.
        gate_calls: LLM calls the gate made per question (a live gate's
            ``GateDecision.llm_calls``); default 1 for an answer-first gate, else 0.
        drafts: per question, whether the gate's draft answer is reused; default
            ``answers_first``.

    So an answer-first gate costs 1 + its retrieval rate per question, a gate that
    reads only the question 1.
    """
    retrieve = np.asarray(retrieve, dtype=bool)
    calls = (
        np.full(retrieve.shape, 1.0 if answers_first else 0.0)
        if gate_calls is None
        else np.asarray(gate_calls, dtype=np.float64)
    )
    reused = np.full(retrieve.shape, answers_first) if drafts is None else np.asarray(drafts, dtype=bool)
    if calls.shape != retrieve.shape or reused.shape != retrieve.shape:
        raise ValueError(
            f"got {calls.size} gate call counts and {reused.size} draft flags for {retrieve.size} decisions"
        )
    return calls + (retrieve | ~reused)


def field_units(
    curve: Curve,
    a: np.ndarray,
    b: np.ndarray,
    retrieve: np.ndarray,
    lm_calls: np.ndarray | None = None,
    *,
    retrieves_first: bool = False,
) -> dict[str, Any]:
    """The report's units at the gate's decisions ``retrieve``.

    Args:
        curve: the gate's accuracy-vs-retrieval-rate curve on these outcomes.
        a, b: per-question correctness without / with retrieval.
        retrieve: the gate's decisions at its (calibrated) threshold.
        lm_calls: LM calls per question (``lm_calls_per_decision``); default one each,
            a gate that reads only the question.
        retrieves_first: the gate retrieves for every question to decide (and answers
            over those passages when it retrieves): one retrieval call per question.

    Returns ``in_accuracy`` (accuracy at the decisions), ``retrieval_calls`` and
    ``lm_calls`` (per question), ``calls_to_match_always`` (retrieval calls per
    question) and ``random_band`` (``random_band(a, b, retrieve)``: where 95% of
    random gates land in gap capture, and in accuracy at the gate's retrieval rate).
    """
    a, b = as_outcomes(a, b)
    retrieve = np.asarray(retrieve, dtype=bool)
    if retrieve.shape != a.shape:
        raise ValueError(f"got {retrieve.size} decisions for {a.size} outcomes")
    calls = np.ones(a.shape) if lm_calls is None else np.asarray(lm_calls, dtype=np.float64)
    if calls.shape != a.shape:
        raise ValueError(f"got {calls.size} LM call counts for {a.size} outcomes")
    return {
        "in_accuracy": float(np.where(retrieve, b, a).mean()),
        "retrieval_calls": 1.0 if retrieves_first else float(retrieve.mean()),
        "lm_calls": float(calls.mean()),
        "calls_to_match_always": calls_to_match_always(curve, float(b.mean())),
        "random_band": random_band(a, b, retrieve),
    }
