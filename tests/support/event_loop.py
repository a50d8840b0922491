"""Whether model work left the event loop free: a task beside it counts its turns."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


def run_beside_a_ticker(work: Awaitable[T]) -> tuple[T, int]:
    """``work``'s result and how many turns a task beside it had meanwhile (a loop that
    work blocks gives it none)."""

    async def run() -> tuple[T, int]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        try:
            return await work, ticks
        finally:
            stop.set()
            await task

    return asyncio.run(run())
