"""Waiting for a server to come up: scripts, tests and benchmarks that start
``adaptive-gates serve`` (or any server with a ``/healthz``) in another process."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx


def wait_until_healthy(
    url: str, *, alive: Callable[[], bool] | None = None, timeout: float = 180.0, interval: float = 0.2
) -> None:
    """Return once ``GET {url}/healthz`` answers 200.

    Raises:
        RuntimeError: ``alive()`` says the server's process ended first.
        TimeoutError: no healthy answer within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError(f"the server for {url} stopped before it was healthy")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(interval)
    raise TimeoutError(f"{url} was not healthy within {timeout:g} s")
