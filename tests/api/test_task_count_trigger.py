"""Quota refusals cannot keep the quota's reads of the task counts busy: after a read, a refusal asks for
the next one only once :data:`tjobs.service.task_counts.MIN_ASKED_READ_INTERVAL_S` passed since it
started; otherwise the node reads every ``limits.task_count_refresh_s``. A read is of the count rows
only: however long it takes, it reads no task."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from types import SimpleNamespace

from tjobs.clock import ManualClock
from tjobs.service.task_counts import MIN_ASKED_READ_INTERVAL_S, TaskCounts


class _CountingStore:
    """One logical database whose read of the counts takes ``read_ms`` on the manual clock."""

    def __init__(self, clock: ManualClock, read_ms: int) -> None:
        self.topology = SimpleNamespace(database_count=1, tables_per_database=16)
        self.reads = 0
        self._clock = clock
        self._read_ms = read_ms

    async def read_task_counts(
        self, database_index: int, app_ids: Collection[str] | None = None
    ) -> dict[str, dict[str, int]]:
        self.reads += 1
        self._clock.advance(self._read_ms)
        return {}


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_refusals_right_after_a_read_wait_for_the_minimum_interval() -> None:
    clock = ManualClock(1_000_000)
    store = _CountingStore(clock, 10)
    counts = TaskCounts(store, clock, refresh_s=3600.0)  # type: ignore[arg-type]
    await counts.start()
    try:
        await _settle()
        assert store.reads == 1
        for _ in range(20):  # a stream of refusals right after the read
            counts.refresh_soon()
            await _settle()
        assert store.reads == 1
        clock.advance(int(MIN_ASKED_READ_INTERVAL_S * 1000) - 11)  # measured from the read's start
        counts.refresh_soon()
        await _settle()
        assert store.reads == 1
        clock.advance(1)
        counts.refresh_soon()
        await _settle()
        assert store.reads == 2
    finally:
        await counts.stop()


async def test_without_refusals_the_node_reads_every_period() -> None:
    clock = ManualClock(1_000_000)
    store = _CountingStore(clock, 10)
    counts = TaskCounts(store, clock, refresh_s=0.01)  # type: ignore[arg-type]
    await counts.start()
    try:
        for _ in range(200):
            await asyncio.sleep(0.001)
            if store.reads >= 3:
                break
        assert store.reads >= 3
    finally:
        await counts.stop()
