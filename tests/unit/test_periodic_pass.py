"""PeriodicPass: a pass every interval, one at once when woken, none after stop. The interval is long
(an hour), so a pass seen here ran because it was woken, never because the interval ended."""

from __future__ import annotations

import asyncio

from tests.delivery_fakes import turns_until
from tjobs.periodic import PeriodicPass


class CountedPass(PeriodicPass):
    name = "counted"

    def __init__(self) -> None:
        super().__init__(interval_s=3600.0)
        self.passes = 0

    async def run_once(self) -> int:
        self.passes += 1
        return 0


async def test_a_wake_starts_one_pass_at_once_however_many_came_before_it() -> None:
    periodic = CountedPass()
    await periodic.start()
    try:
        for _ in range(50):
            await asyncio.sleep(0)
        assert periodic.passes == 0  # the interval has not ended

        periodic.wake()
        periodic.wake()
        await turns_until(lambda: periodic.passes == 1, "the woken pass")
        for _ in range(50):
            await asyncio.sleep(0)
        assert periodic.passes == 1  # two wakes before it started: one pass

        periodic.wake()
        await turns_until(lambda: periodic.passes == 2, "the second woken pass")
    finally:
        await periodic.stop(timeout_s=1.0)
    periodic.wake()  # stopped: nothing runs
    for _ in range(50):
        await asyncio.sleep(0)
    assert periodic.passes == 2


async def test_stop_ends_the_wait_at_once() -> None:
    periodic = CountedPass()
    await periodic.start()
    await asyncio.sleep(0)
    await asyncio.wait_for(periodic.stop(timeout_s=5.0), timeout=1.0)
    assert periodic.passes == 0
