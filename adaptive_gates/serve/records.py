"""What the server remembers of its answers: each decision under an id (for feedback
and for the page), and the running totals of what the gate saved."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..gates.base.feedback import Feedback
from ..records.decision import AnswerRoute, GateDecision
from ..retrieval.base import Hit


@dataclass
class ServedDecision:
    """One answered request: the gate's decision, the route taken, the passages used,
    where the time went (milliseconds), the id of the API key that asked (``None`` on a
    server without keys) and the verdict feedback gave on the answer, once given."""

    id: str
    route: AnswerRoute
    decision: GateDecision
    passages: list[Hit] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)
    owner: str | None = None
    verdict: bool | None = None

    @classmethod
    def new(cls, decision: GateDecision, passages: list[Hit], owner: str | None = None) -> ServedDecision:
        """A record under a new id: 128 random bits, which no one guesses."""
        latency = {"gate": decision.latency_ms}
        return cls(f"dec-{uuid.uuid4().hex}", decision.route, decision, passages, latency, owner)

    def summary(self) -> dict[str, Any]:
        """The few fields the response header carries."""
        d = self.decision
        return {
            "id": self.id,
            "route": self.route,
            "retrieve": d.retrieve,
            "score": _finite(d.score),
            "threshold": _finite(d.threshold),
            "gate": d.gate,
        }

    def to_dict(self, stats: dict[str, Any]) -> dict[str, Any]:
        """The record a completion carries (``adaptive_gates``)."""
        return {
            "id": self.id,
            "route": self.route,
            "decision": self.decision.to_dict(),
            "passages": [
                {"id": h.id, "title": h.title, "text": h.text, "score": _finite(h.score)} for h in self.passages
            ],
            "latency_ms": dict(self.latency_ms),
            "stats": stats,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class DecisionBook:
    """The latest ``capacity`` decisions by id, each for ``max_age`` seconds, for
    feedback; safe from many threads."""

    def __init__(
        self, capacity: int = 10_000, max_age: float = 3600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if capacity < 1 or not max_age > 0:
            raise ValueError(f"capacity must be >= 1 and max_age > 0, got {capacity} and {max_age}")
        self.capacity = capacity
        self.max_age = max_age
        self.clock = clock
        self._entries: OrderedDict[str, tuple[float, ServedDecision]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, served: ServedDecision) -> None:
        with self._lock:
            self._entries[served.id] = (self.clock(), served)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def get(self, decision_id: str) -> ServedDecision | None:
        """The decision, while it is younger than ``max_age``."""
        with self._lock:
            now = self.clock()
            while self._entries and now - next(iter(self._entries.values()))[0] > self.max_age:
                self._entries.popitem(last=False)  # the oldest first: put keeps them in order
            kept = self._entries.get(decision_id)
            return None if kept is None else kept[1]


@dataclass(frozen=True)
class Lesson:
    """A verdict the gate learnt from: on which answer (``decision_id``), of which
    judged question and route, whether the answer was correct, the label it gave the
    memory (``"known"``, ``"unknown"``, or ``None`` for none), who gave it (an API key's
    id, or an address), when (seconds since the epoch), and when it was taken back
    (``reverted_at``, ``None`` while it stands). ``entry`` is what the gate logged, the
    handle to withdraw it by."""

    decision_id: str
    question: str | None
    route: AnswerRoute
    correct: bool
    label: str | None
    judged_by: str | None
    judged_at: float
    entry: Feedback
    reverted_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The lesson as the admin API lists it (the gate's own entry left out)."""
        fields = asdict(self)
        del fields["entry"]
        return fields


class LessonLog:
    """The latest ``capacity`` lessons, newest first on reading; safe from many threads.
    They outlive the decisions' book, so an admin can see what taught the gate, and take
    a lesson back."""

    def __init__(self, capacity: int = 1_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._lessons: deque[Lesson] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def add(self, lesson: Lesson) -> None:
        with self._lock:
            self._lessons.append(lesson)

    def recent(self, limit: int) -> list[Lesson]:
        """The ``limit`` latest lessons, newest first."""
        with self._lock:
            return list(reversed(self._lessons))[:limit]

    def find(self, decision_id: str) -> Lesson | None:
        """The lesson given on ``decision_id``'s answer, while the log keeps it."""
        with self._lock:
            return next((lesson for lesson in self._lessons if lesson.decision_id == decision_id), None)

    def mark_reverted(self, decision_id: str, when: float) -> Lesson | None:
        """Record that the lesson on ``decision_id`` was taken back; the lesson as now listed."""
        with self._lock:
            for i, lesson in enumerate(self._lessons):
                if lesson.decision_id == decision_id:
                    self._lessons[i] = replace(lesson, reverted_at=when)
                    return self._lessons[i]
        return None


class Tally:
    """Running totals: requests, those that retrieved, drafts served, fallbacks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = self.retrieved = self.drafts = self.fallbacks = 0

    def count(self, served: ServedDecision) -> dict[str, Any]:
        """Count one answered request; return the totals after it."""
        with self._lock:
            self.requests += 1
            self.retrieved += served.route == "retrieve"
            self.drafts += served.route == "draft"
            self.fallbacks += served.decision.is_fallback
            return self._snapshot()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "retrieved": self.retrieved,
            "drafts": self.drafts,
            "fallbacks": self.fallbacks,
            "retrieval_rate": self.retrieved / self.requests if self.requests else None,
            "retrieval_calls_saved": self.requests - self.retrieved,
            "llm_calls_saved": self.drafts,
        }
