"""Quota refusals cannot keep the quota's reads of the task counts busy, nor re-divide a burst's room
while it runs: a refusal asks for a read :data:`tjobs.service.task_counts.ASKED_READ_DELAY_S` after it,
one pending at a time, however many refusals follow; otherwise the node reads every
``limits.task_count_refresh_s``. A read is of the count rows only: it reads no task."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from types import SimpleNamespace

from tjobs.clock import ManualClock
from tjobs.service.task_counts import ASKED_READ_DELAY_S, TaskCounts

DELAY_S = 0.2  # the asked read's delay in these tests (ASKED_READ_DELAY_S in a node)


class _CountingStore:
    def __init__(self) -> None:
        self.topology = SimpleNamespace(database_count=1, tables_per_database=16)
        self.reads = 0

    async def read_task_counts(
        self, database_index: int, app_ids: Collection[str] | None = None
    ) -> dict[str, dict[str, int]]:
        self.reads += 1
        return {}


async def test_refusals_ask_for_one_read_after_the_delay() -> None:
    assert ASKED_READ_DELAY_S >= 1.0  # a burst from rest is over before a refusal re-divides its room
    store = _CountingStore()
    counts = TaskCounts(store, ManualClock(1_000_000), refresh_s=3600.0, asked_read_delay_s=DELAY_S)  # type: ignore[arg-type]
    await counts.start()
    try:
        await asyncio.sleep(0.01)
        assert store.reads == 1  # the first read, at start
        for _ in range(20):  # a stream of refusals
            counts.refresh_soon()
            await asyncio.sleep(0.001)
        assert store.reads == 1  # none before the delay
        await asyncio.sleep(DELAY_S + 0.1)
        assert store.reads == 2  # one read for them all
        counts.refresh_soon()  # a refusal after it asks for the next
        await asyncio.sleep(DELAY_S / 2)
        assert store.reads == 2
        await asyncio.sleep(DELAY_S / 2 + 0.1)
        assert store.reads == 3
    finally:
        await counts.stop()


async def test_without_refusals_the_node_reads_every_period() -> None:
    store = _CountingStore()
    counts = TaskCounts(store, ManualClock(1_000_000), refresh_s=0.01)  # type: ignore[arg-type]
    await counts.start()
    try:
        for _ in range(200):
            await asyncio.sleep(0.005)
            if store.reads >= 3:
                break
        assert store.reads >= 3
    finally:
        await counts.stop()
