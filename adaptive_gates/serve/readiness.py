"""``GET /readyz``: whether ``adaptive-gates serve`` can answer now, not only whether it
is alive (``/healthz``). A server listens only once its gate is loaded and its corpus
indexed, so what can fail later is what it reaches over the network: the upstream LLM,
and the database that holds the corpus or the gate's memory. Each is asked something
cheap (the upstream's ``/models``, the collection's size), within a few seconds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sized
from typing import Any

import httpx

logger = logging.getLogger(__name__)

#: Seconds each dependency has to answer.
CHECK_SECONDS = 5.0


async def readiness(upstream: object, retriever: object, gate: object) -> dict[str, str]:
    """Each dependency's state: ``"ok"``, or what is wrong with it."""
    checks: dict[str, Callable[[], object]] = {"upstream": lambda: _reach_upstream(upstream)}
    if isinstance(retriever, Sized):
        checks["corpus"] = lambda: len(retriever)
    memory = getattr(gate, "memory_", None)
    if memory is not None:
        checks["memory"] = lambda: len(memory)
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
