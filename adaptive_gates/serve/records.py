"""What the server remembers of its answers: each decision under an id (for feedback
and for the page), and the running totals of what the gate saved."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..gates.base.feedback import Feedback
from ..persistence import strict_json
from ..persistence.json_lines import dumps_line, split_lines
from ..records.answer_metrics import normalize_answer
from ..records.decision import AnswerRoute, GateDecision
from ..records.selfknowledge import KNOWN, UNKNOWN
from ..retrieval.base import Hit

logger = logging.getLogger(__name__)


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

    def judge(self, decision_id: str, verdict: bool | None) -> bool:
        """Give the decision its ``verdict`` unless it has one (``None``: take it back,
        for a verdict not taken after all); whether it was given."""
        with self._lock:
            kept = self._entries.get(decision_id)
            if kept is None or (verdict is not None and kept[1].verdict is not None):
                return False
            kept[1].verdict = verdict
            return True


#: A lesson's status: taught to the gate, or waiting for its quorum of agreeing keys.
TAUGHT, PENDING = "taught", "pending"


@dataclass(frozen=True)
class Lesson:
    """A verdict on an answer: on which answer (``decision_id``), of which judged question
    and route (``retrieved``: whether the answer was made with retrieval), whether the
    answer was correct, the label it gave the memory (``"known"``, ``"unknown"``, or
    ``None`` for none or not yet), who gave it (an API key's id, never the key, or an
    address) and whether that was an admin key, when (seconds since the epoch), whether
    it is ``"taught"`` to the gate or ``"pending"`` its quorum of agreeing keys, and when
    it was taken back (``reverted_at``, ``None`` while it stands). ``entry`` is what the
    gate logged once taught, the handle to withdraw it by; ``decision`` the decision
    judged, while this process holds it (a pending verdict is taught from it)."""

    decision_id: str
    question: str | None
    route: AnswerRoute
    retrieved: bool
    correct: bool
    label: str | None
    judged_by: str | None
    judged_at: float
    admin: bool = False
    status: str = TAUGHT
    entry: Feedback | None = None
    reverted_at: float | None = None
    decision: GateDecision | None = field(default=None, compare=False)

    @property
    def agreement(self) -> tuple[str, bool, bool] | None:
        """What verdicts agree on: the question (as feedback reads it: case, punctuation
        and articles aside), the route and the verdict; ``None`` without a question."""
        return None if self.question is None else (normalize_answer(self.question), self.retrieved, self.correct)

    def to_dict(self) -> dict[str, Any]:
        """The lesson as the admin API lists it (the gate's own entry and the decision
        left out)."""
        return {name: getattr(self, name) for name in _LINE_FIELDS}

    def to_line(self) -> str:
        """The lesson as a line of the lessons file (``dumps_line``: no line separator of
        Unicode's, such as U+2028, ends its line early)."""
        return dumps_line(self.to_dict())

    @classmethod
    def from_line(cls, line: str) -> Lesson:
        """The lesson ``to_line`` wrote (``ValueError`` naming what is wrong)."""
        obj = strict_json.loads(line)
        if not isinstance(obj, dict) or set(obj) != set(_LINE_FIELDS):
            raise ValueError(f"expected the fields {', '.join(_LINE_FIELDS)}")
        checks = {
            "decision_id": isinstance(obj["decision_id"], str),
            "question": obj["question"] is None or isinstance(obj["question"], str),
            "route": obj["route"] in ("direct", "retrieve", "draft"),
            "retrieved": isinstance(obj["retrieved"], bool),
            "correct": isinstance(obj["correct"], bool),
            "label": obj["label"] in (None, "known", "unknown"),
            "judged_by": obj["judged_by"] is None or isinstance(obj["judged_by"], str),
            "judged_at": _is_time(obj["judged_at"]),
            "admin": isinstance(obj["admin"], bool),
            "status": obj["status"] in (TAUGHT, PENDING),
            "reverted_at": obj["reverted_at"] is None or _is_time(obj["reverted_at"]),
        }
        wrong = [name for name, ok in checks.items() if not ok]
        if wrong:
            raise ValueError(f"field {wrong[0]!r} has the wrong type or value")
        entry = None
        if obj["status"] == TAUGHT and obj["question"] is not None:
            label = None if obj["label"] is None else (UNKNOWN if obj["label"] == "unknown" else KNOWN)
            entry = Feedback(obj["question"], obj["retrieved"], obj["correct"], label)
        return cls(**{**obj, "judged_at": float(obj["judged_at"]), "entry": entry})


#: What a lesson is listed and kept with, in order: all but the gate's entry and the decision.
_LINE_FIELDS = tuple(f.name for f in fields(Lesson) if f.name not in ("entry", "decision"))


def _is_time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class LessonLog:
    """The latest ``capacity`` lessons, newest first on reading; safe from many threads.
    They outlive the decisions' book, so an admin can see what taught the gate, and take
    a lesson back. With ``path``, every change is written to that file (JSON lines, the
    whole log each time, swapped in whole), and ``load`` reads it back after a restart."""

    def __init__(self, capacity: int = 1_000, path: Path | None = None, lessons: Iterable[Lesson] = ()) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.path = path
        self._lessons: deque[Lesson] = deque(lessons, maxlen=capacity)
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path, capacity: int = 1_000) -> LessonLog:
        """The log written to ``path`` (empty while there is no such file), written there
        on from now on. Lines are split at ``\\n`` only.

        Raises:
            ValueError: the file cannot be read, or a line is no lesson (naming the line).
        """
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(capacity, path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: unreadable ({exc})") from None
        lessons = []
        for number, line in enumerate(split_lines(text), 1):
            if not line:
                continue
            try:
                lessons.append(Lesson.from_line(line))
            except ValueError as exc:
                raise ValueError(f"{path}, line {number}: not a lesson ({exc})") from None
        return cls(capacity, path, lessons)

    def add(self, lesson: Lesson) -> None:
        with self._lock:
            self._lessons.append(lesson)
            self._write()

    def recent(self, limit: int) -> list[Lesson]:
        """The ``limit`` latest lessons, newest first."""
        with self._lock:
            return list(reversed(self._lessons))[:limit]

    def all(self) -> list[Lesson]:
        """Every lesson kept, oldest first."""
        with self._lock:
            return list(self._lessons)

    def find(self, decision_id: str) -> Lesson | None:
        """The lesson given on ``decision_id``'s answer, while the log keeps it."""
        with self._lock:
            return next((lesson for lesson in self._lessons if lesson.decision_id == decision_id), None)

    def mark_reverted(self, decision_id: str, when: float) -> Lesson | None:
        """Record that the lesson on ``decision_id`` was taken back; the lesson as now listed."""
        return self.update(decision_id, reverted_at=when)

    def update(self, decision_id: str, **changes: Any) -> Lesson | None:
        """The lesson on ``decision_id`` with ``changes`` (e.g. taught at last); the
        lesson as now listed, ``None`` when the log no longer keeps it."""
        with self._lock:
            for i, lesson in enumerate(self._lessons):
                if lesson.decision_id == decision_id:
                    self._lessons[i] = replace(lesson, **changes)
                    self._write()
                    return self._lessons[i]
        return None

    def _write(self) -> None:
        """The whole log to ``path`` (under the lock), swapped in whole: a reader, or a
        crash midway, never sees half of it."""
        if self.path is None:
            return
        part = self.path.with_name(self.path.name + ".part")
        try:
            part.write_text("".join(lesson.to_line() for lesson in self._lessons), encoding="utf-8")
            os.replace(part, self.path)
        except OSError as exc:  # the lesson stands, and is listed; the next change writes again
            logger.error("cannot keep the lessons in %s: %s", self.path, exc)


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
