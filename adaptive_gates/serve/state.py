"""Where ``adaptive-gates serve`` keeps what its replicas must agree on: the decision
book (which answers a verdict may judge), the lessons list, the feedback quotas and the
rate limits.

``StateStore`` is the seam. ``LocalState`` keeps them in the process (one server: the
default); ``RedisState`` keeps them in Redis (``serve --state-url redis://HOST:PORT/DB``),
so servers behind one load balancer share them: a verdict may be sent to any of them, a
lesson is listed and reverted from any, and a quota is counted once. Every change is one
atomic Redis operation (a transaction or a Lua script). A store that cannot be reached
raises ``StateStoreUnavailableError``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from ..errors import StateStoreUnavailableError, UsageError
from ..records.decision import GateDecision
from ..retrieval.base import Hit
from .limits import TokenBuckets
from .records import DecisionBook, Lesson, LessonLog, ServedDecision

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a Redis command (or a connection) may take before the store counts as unreachable.
REDIS_TIMEOUT = 2.0


class Buckets(Protocol):
    """A token bucket per client (``limits.TokenBuckets``)."""

    def take(self, client: str) -> int:
        """0 to go ahead, or the whole seconds until ``client`` may again."""
        ...


class DecisionStore(Protocol):
    """The decisions a verdict may judge, by id (``records.DecisionBook``)."""

    def put(self, served: ServedDecision) -> None: ...

    def get(self, decision_id: str) -> ServedDecision | None: ...

    def judge(self, decision_id: str, verdict: bool | None) -> bool:
        """Give the decision its ``verdict`` unless it has one (``None``: take it back,
        for a verdict not taken after all); whether it was given."""
        ...


class LessonStore(Protocol):
    """The lessons list (``records.LessonLog``)."""

    def add(self, lesson: Lesson) -> None: ...

    def recent(self, limit: int) -> list[Lesson]: ...

    def all(self) -> list[Lesson]: ...

    def find(self, decision_id: str) -> Lesson | None: ...

    def update(self, decision_id: str, **changes: Any) -> Lesson | None: ...

    def mark_reverted(self, decision_id: str, when: float) -> Lesson | None: ...


class StateStore(Protocol):
    """What a server's replicas share: ``book``, ``lessons`` and the buckets of a quota or a
    rate limit by ``name``. ``shared``: other processes change it too (what a process
    derives from it is not kept)."""

    @property
    def book(self) -> DecisionStore: ...

    @property
    def lessons(self) -> LessonStore: ...

    @property
    def shared(self) -> bool: ...

    def buckets(self, name: str, per_period: int, period: float) -> Buckets: ...

    def ping(self) -> None:
        """Return when the store answers; ``StateStoreUnavailableError`` when it does not."""
        ...


class LocalState:
    """The state of one process: a ``DecisionBook``, a ``LessonLog`` (``lessons``: one
    persisted beside the gate, say) and ``TokenBuckets``."""

    shared = False

    def __init__(self, lessons: LessonLog | None = None) -> None:
        self.book: DecisionBook = DecisionBook()
        self.lessons: LessonLog = lessons if lessons is not None else LessonLog()

    def buckets(self, name: str, per_period: int, period: float) -> TokenBuckets:
        return TokenBuckets(per_period, period)

    def ping(self) -> None:
        return None


# ---------------------------------------------------------------------- Redis

#: Give a decision its verdict unless it has one: 1 given, 0 it has one, -1 no such decision.
_JUDGE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[1] == '' then redis.call('HDEL', KEYS[1], 'verdict') return 1 end
return redis.call('HSETNX', KEYS[1], 'verdict', ARGV[1])
"""

#: Add a lesson (ARGV: id, line, capacity): its id last in the list, its line in the hash,
#: the oldest dropped past the capacity.
_ADD_LESSON = """
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[1], ARGV[1])
local capacity = tonumber(ARGV[3])
while redis.call('LLEN', KEYS[1]) > capacity do
  local oldest = redis.call('LPOP', KEYS[1])
  redis.call('HDEL', KEYS[2], oldest)
end
return 1
"""

#: A token bucket (ARGV: per_period, period): 0 and one token taken, or the whole seconds
#: until one is back. The server's clock, so replicas' clocks never disagree.
_TAKE = """
local per_period = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local rate = per_period / period
local kept = redis.call('HMGET', KEYS[1], 'tokens', 'when')
local tokens = tonumber(kept[1]) or per_period
local when = tonumber(kept[2]) or now
tokens = math.min(per_period, tokens + math.max(0, now - when) * rate)
local wait = 0
if tokens < 1 then
  wait = math.ceil((1 - tokens) / rate)
else
  tokens = tokens - 1
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'when', string.format('%.17g', now))
redis.call('EXPIRE', KEYS[1], math.ceil(period))
return wait
"""


class RedisState:
    """The state kept in Redis through ``client`` (a ``redis.Redis``), under keys that
    begin with ``prefix``. A decision is a hash that expires after ``max_age`` seconds;
    the lessons list is a Redis list of decision ids (the latest ``lesson_capacity``,
    oldest first) beside a hash of their lines (``Lesson.to_line``); a bucket is a hash
    that expires once it would be full again."""

    shared = True

    def __init__(
        self, client: Any, *, prefix: str = "adaptive-gates:", max_age: float = 3600.0, lesson_capacity: int = 1_000
    ) -> None:
        if not max_age > 0 or lesson_capacity < 1:
            raise ValueError(f"max_age must be > 0 and lesson_capacity >= 1, got {max_age} and {lesson_capacity}")
        self.client = client
        self.prefix = prefix
        self.book = RedisDecisionBook(self, max_age)
        self.lessons = RedisLessonLog(self, lesson_capacity)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisState:
        """The store at ``url`` (``redis://HOST:PORT/DB``, or ``rediss://`` over TLS).

        Raises:
            MissingExtraError: redis-py is not installed (the ``redis`` extra).
            UsageError: ``url`` is no Redis URL.
        """
        from ..models.optional import require

        redis = require("redis", "redis", needed_for="--state-url")
        try:
            client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)
        except ValueError as exc:
            raise UsageError(f"--state-url is no Redis URL (redis://HOST:PORT/DB): {exc}") from None
        return cls(client, **options)

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def call(self, command: Callable[[], T]) -> T:
        """``command``'s result; ``StateStoreUnavailableError`` when Redis cannot be reached."""
        from redis.exceptions import ConnectionError, TimeoutError

        try:
            return command()
        except (ConnectionError, TimeoutError) as exc:
            logger.warning("the state store is unreachable: %s", exc)
            raise StateStoreUnavailableError("the state store is unreachable; try again later") from None

    def script(self, source: str, keys: list[str], args: list[Any]) -> Any:
        return self.call(lambda: self.client.eval(source, len(keys), *keys, *args))

    def buckets(self, name: str, per_period: int, period: float) -> RedisBuckets:
        return RedisBuckets(self, name, per_period, period)

    def ping(self) -> None:
        self.call(self.client.ping)


class RedisDecisionBook:
    """``DecisionStore`` in Redis: each decision a hash (``record``: its JSON, ``verdict``
    once judged) that expires after ``max_age`` seconds."""

    def __init__(self, state: RedisState, max_age: float) -> None:
        self.state = state
        self.max_age = max_age

    def _key(self, decision_id: str) -> str:
        return self.state.key("decision", decision_id)

    def put(self, served: ServedDecision) -> None:
        record = json.dumps(
            {
                "route": served.route,
                "decision": served.decision.to_dict(),
                "passages": [{"id": h.id, "title": h.title, "text": h.text, "score": h.score} for h in served.passages],
                "latency_ms": served.latency_ms,
                "owner": served.owner,
            }
        )
        key = self._key(served.id)

        def write() -> None:
            with self.state.client.pipeline(transaction=True) as pipe:
                pipe.hset(key, "record", record)
                if served.verdict is not None:
                    pipe.hset(key, "verdict", _verdict(served.verdict))
                pipe.expire(key, max(1, round(self.max_age)))
                pipe.execute()

        self.state.call(write)

    def get(self, decision_id: str) -> ServedDecision | None:
        kept = self.state.call(lambda: self.state.client.hgetall(self._key(decision_id)))
        if not kept or b"record" not in kept:
            return None
        record = json.loads(kept[b"record"])
        passages = [Hit(p["id"], p["text"], p["score"], p["title"]) for p in record["passages"]]
        verdict = kept.get(b"verdict")
        return ServedDecision(
            decision_id,
            record["route"],
            GateDecision.from_dict(record["decision"]),
            passages,
            record["latency_ms"],
            record["owner"],
            None if verdict is None else verdict == b"true",
        )

    def judge(self, decision_id: str, verdict: bool | None) -> bool:
        given = self.state.script(_JUDGE, [self._key(decision_id)], ["" if verdict is None else _verdict(verdict)])
        return int(given) == 1


def _verdict(verdict: bool) -> str:
    return "true" if verdict else "false"


class RedisLessonLog:
    """``LessonStore`` in Redis: the latest ``capacity`` lessons, newest first on reading.
    A lesson read back is as a restart reads it from the lessons file: its gate entry
    from its fields, without the decision (a pending one is taught from its question)."""

    def __init__(self, state: RedisState, capacity: int) -> None:
        self.state = state
        self.capacity = capacity
        self._ids = state.key("lessons")
        self._lines = state.key("lesson-lines")

    def add(self, lesson: Lesson) -> None:
        self.state.script(_ADD_LESSON, [self._ids, self._lines], [lesson.decision_id, lesson.to_line(), self.capacity])

    def recent(self, limit: int) -> list[Lesson]:
        return list(reversed(self._read(-limit, -1))) if limit > 0 else []

    def all(self) -> list[Lesson]:
        return self._read(0, -1)

    def find(self, decision_id: str) -> Lesson | None:
        line = self.state.call(lambda: self.state.client.hget(self._lines, decision_id))
        return None if line is None else Lesson.from_line(line.decode("utf-8"))

    def mark_reverted(self, decision_id: str, when: float) -> Lesson | None:
        return self.update(decision_id, reverted_at=when)

    def update(self, decision_id: str, **changes: Any) -> Lesson | None:
        """The lesson with ``changes``, read and written in one transaction (retried when
        another server changed it meanwhile); ``None`` when the list no longer keeps it."""
        changes.pop("entry", None)  # rebuilt from the lesson's fields on reading
        changes.pop("decision", None)

        def change(pipe: Any) -> Lesson | None:
            line = pipe.hget(self._lines, decision_id)
            if line is None:
                return None
            lesson = replace(Lesson.from_line(line.decode("utf-8")), **changes)
            pipe.multi()
            pipe.hset(self._lines, decision_id, lesson.to_line())
            return Lesson.from_line(lesson.to_line())

        return self.state.call(lambda: self.state.client.transaction(change, self._lines, value_from_callable=True))

    def _read(self, start: int, end: int) -> list[Lesson]:
        def read() -> list[bytes | None]:
            ids = self.state.client.lrange(self._ids, start, end)
            return self.state.client.hmget(self._lines, ids) if ids else []

        return [Lesson.from_line(line.decode("utf-8")) for line in self.state.call(read) if line is not None]


class RedisBuckets:
    """``Buckets`` in Redis: one hash a client under ``name``, taken from atomically (a
    Lua script on Redis' clock)."""

    def __init__(self, state: RedisState, name: str, per_period: int, period: float) -> None:
        if per_period < 1 or not period > 0:
            raise ValueError(f"per_period must be >= 1 and period > 0, got {per_period} and {period}")
        self.state = state
        self.name = name
        self.per_period = per_period
        self.period = period

    def take(self, client: str) -> int:
        key = self.state.key("bucket", self.name, client)
        return int(self.state.script(_TAKE, [key], [self.per_period, self.period]))
