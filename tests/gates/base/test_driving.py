"""The one driver of work written as steps: blocking and awaited give the same result,
a failing step is thrown into the work, and the work is closed however the drive ends."""

from __future__ import annotations

import asyncio
import threading

import pytest

from adaptive_gates.gates.base.driving import adrive, drive


def doubling(values, log):
    """Asks for each value doubled; a failed step counts as 0. Logs where it ran and
    that it was closed."""
    total = 0
    try:
        for value in values:
            log.append(threading.get_ident())
            try:
                total += yield value
            except ValueError:
                total += 0
        return total
    finally:
        log.append("closed")


def double(value):
    if value < 0:
        raise ValueError("negative")
    return 2 * value


async def adouble(value):
    await asyncio.sleep(0)
    return double(value)


def test_blocking_and_awaited_drives_agree_and_failing_steps_are_thrown_in():
    log: list = []
    assert drive(doubling([1, -5, 3], log), double) == 8
    assert asyncio.run(adrive(doubling([1, -5, 3], log), adouble)) == 8
    assert asyncio.run(adrive(doubling([1, -5, 3], log), adouble, resume_in_thread=True)) == 8
    assert log.count("closed") == 3


def test_resuming_in_a_thread_keeps_the_works_computing_off_the_loop():
    async def main():
        log: list = []
        await adrive(doubling([1, 2], log), adouble, resume_in_thread=True)
        return log, threading.get_ident()

    log, loop_thread = asyncio.run(main())
    assert [t for t in log if t != "closed"] and all(t != loop_thread for t in log if t != "closed")


def test_an_exception_the_work_does_not_handle_ends_the_drive_and_closes_the_work():
    log: list = []

    def refuse(value):
        raise KeyError(value)  # the work catches only ValueError

    with pytest.raises(KeyError):
        drive(doubling([1, 2], log), refuse)
    assert log[-1] == "closed" and len(log) == 2  # asked once, then closed

    async def cancelled_mid_step():
        async def hang(value):
            await asyncio.sleep(3600)

        task = asyncio.create_task(adrive(doubling([1, 2], log), hang))
        while len(log) < 3:  # the work has asked its first step
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_mid_step())
    assert log[-1] == "closed" and len(log) == 4
