"""``GET /readyz``: whether ``adaptive-gates serve`` can answer now, not only whether it
is alive (``/healthz``). A server listens only once its gate is loaded and its corpus
indexed, so what can fail later is what it reaches over the network: the upstream LLM,
the database that holds the corpus or the gate's memory, and the state store the
servers share (``serve --state-url``). Each is asked something
cheap (the upstream's ``/models``, the collection's size), within a few seconds. The
route is public, so a result is reused for a moment: a flood of ``/readyz`` requests
costs the upstream and the database one check each that often."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sized
from typing import Any

import httpx

logger = logging.getLogger(__name__)

#: Seconds each dependency has to answer.
CHECK_SECONDS = 5.0
#: Seconds a readiness result is reused.
REUSE_SECONDS = 2.0


class Readiness:
    """The readiness of one server's dependencies (``readiness``), checked at most once
    every ``reuse_seconds``: requests in between get the last result, and requests that
    arrive during a check wait for it rather than start their own."""

    def __init__(
        self,
        upstream: object,
        retriever: object,
        gate: object,
        reuse_seconds: float = REUSE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        state: object = None,
    ) -> None:
        self._dependencies = (upstream, retriever, gate, state)
        self.reuse_seconds = reuse_seconds
        self._clock = clock
        self._lock = asyncio.Lock()
        self._checked_at = -math.inf
        self._checks: dict[str, str] = {}

    async def checks(self) -> dict[str, str]:
        """Each dependency's state: ``"ok"``, or what is wrong with it."""
        async with self._lock:
            if self._clock() - self._checked_at >= self.reuse_seconds:
                self._checks = await readiness(*self._dependencies)
                self._checked_at = self._clock()
            return dict(self._checks)


async def readiness(upstream: object, retriever: object, gate: object, state: object = None) -> dict[str, str]:
    """Each dependency's state: ``"ok"``, or what is wrong with it (``state``: the state
    store, checked when the servers share it)."""
    checks: dict[str, Callable[[], object]] = {"upstream": lambda: _reach_upstream(upstream)}
    if isinstance(retriever, Sized):
        checks["corpus"] = lambda: len(retriever)
    memory = getattr(gate, "memory_", None)
    if memory is not None:
        checks["memory"] = lambda: len(memory)
    ping = getattr(state, "ping", None)
    if getattr(state, "shared", False) and callable(ping):
        checks["state"] = ping
    states = await asyncio.gather(*(_state(name, check) for name, check in checks.items()))
    return dict(zip(checks, states))


async def _state(name: str, check: Callable[[], object]) -> str:
    try:
        async with asyncio.timeout(CHECK_SECONDS):
            await asyncio.to_thread(check)
    except TimeoutError:
        return f"no answer within {CHECK_SECONDS:g} s"
    except Exception as exc:  # whatever it is, the server is not ready: say what
        logger.warning("readiness: %s: %s", name, exc)
        return f"unreachable ({type(exc).__name__})"
    return "ok"


def _reach_upstream(upstream: Any) -> None:
    """An upstream behind a URL answers HTTP at all (any status: a 401 is reachable);
    an in-process one is ready once loaded."""
    base_url = getattr(upstream, "base_url", None)
    if base_url is None:
        return
    httpx.get(f"{str(base_url).rstrip('/')}/models", timeout=CHECK_SECONDS)
