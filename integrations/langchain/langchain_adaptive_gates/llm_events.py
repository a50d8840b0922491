"""The LLM calls a gate makes to decide, collected for LangChain's custom events.

The core reports each request a gate sends its chat model to the listeners of a
``listening`` block; ``LLMCalls`` is such a listener. The calls are collected while the
gate decides and dispatched afterwards, so the sync and async paths dispatch the same
way (a listener is called synchronously, often in a backend's worker thread, where an
async dispatch could not be awaited).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

from adaptive_gates.extend import LLMCallEvent

#: Name of the custom event each LLM call of a gate is dispatched as (data: the
#: core's ``LLMCallEvent`` as a dict: gate, model_id, purpose, messages, reply, error,
#: latency_ms).
LLM_CALL_EVENT = "adaptive_gates_llm_call"


def llm_call_payload(event: LLMCallEvent) -> dict[str, Any]:
    """The event as a JSON-ready dict (the messages as a list of dicts)."""
    out = dataclasses.asdict(event)
    out["messages"] = [dict(m) for m in event.messages]
    return out


class LLMCalls:
    """A core listener keeping every LLM call reported to it, in order."""

    def __init__(self) -> None:
        self._events: list[LLMCallEvent] = []
        self._lock = threading.Lock()  # the backends report from their worker threads

    def on_llm_call(self, event: LLMCallEvent) -> None:
        with self._lock:
            self._events.append(event)

    def by_question(self, questions: Sequence[Any]) -> list[tuple[list[int], dict[str, Any]]]:
        """Each call's payload with the positions of the ``questions`` it was about: the
        longest question its messages contain (a batch asks about several), or all of
        them when its messages contain none."""
        with self._lock:
            events = list(self._events)
        out = []
        for event in events:
            sent = "\n".join(str(m.get("content", "")) for m in event.messages)
            asked = [i for i, q in enumerate(questions) if isinstance(q, str) and q and q in sent]
            if asked:
                longest = max(len(questions[i]) for i in asked)
                asked = [i for i in asked if len(questions[i]) == longest]
            out.append((asked or list(range(len(questions))), llm_call_payload(event)))
        return out
