"""Stats reads cannot keep the task counter busy: after a pass, a read asks for the next one only once
the counter has rested :data:`tjobs.service.task_counts.MIN_ASKED_PASS_INTERVAL_S`, and
:data:`tjobs.service.task_counts.ASKED_PASS_REST_FACTOR` times as long as that pass took, since it ended."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from types import SimpleNamespace

from tjobs.clock import ManualClock
from tjobs.service.task_counts import ASKED_PASS_REST_FACTOR, MIN_ASKED_PASS_INTERVAL_S, TaskCounts
from tjobs.stores.base import DatabaseCounts
from tjobs.stores.contracts.tasks import no_tasks


class _SlowCountingStore:
    """One logical database whose count takes ``pass_ms`` on the manual clock (a large table)."""

    def __init__(self, clock: ManualClock, pass_ms: int) -> None:
        self.topology = SimpleNamespace(database_count=1, tables_per_database=16)
        self.passes = 0
        self._clock = clock
        self._pass_ms = pass_ms

    async def count_by_app(self, database: int, then_ask: Callable[[], Collection[int]] = no_tasks) -> DatabaseCounts:
        self.passes += 1
        self._clock.advance(self._pass_ms)
        return DatabaseCounts({})


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_reads_after_a_slow_pass_wait_for_the_counter_to_rest() -> None:
    clock = ManualClock(1_000_000)
    pass_ms = 3_000  # longer than MIN_ASKED_PASS_INTERVAL_S: a pass start is "old enough" as it ends
    store = _SlowCountingStore(clock, pass_ms)
    counts = TaskCounts(store, clock, refresh_s=3600.0)  # type: ignore[arg-type]
    await counts.start()
    try:
        await _settle()
        assert store.passes == 1
        for _ in range(20):  # a read stream right after the pass
            counts.refresh_soon()
            await _settle()
        assert store.passes == 1
        rest_ms = int(max(MIN_ASKED_PASS_INTERVAL_S * 1000, ASKED_PASS_REST_FACTOR * pass_ms))
        clock.advance(rest_ms - 1)
        counts.refresh_soon()
        await _settle()
        assert store.passes == 1
        clock.advance(1)
        counts.refresh_soon()
        await _settle()
        assert store.passes == 2
    finally:
        await counts.stop()


async def test_after_a_quick_pass_a_read_asks_for_the_next_once_the_minimum_interval_passed() -> None:
    clock = ManualClock(1_000_000)
    store = _SlowCountingStore(clock, 10)
    counts = TaskCounts(store, clock, refresh_s=3600.0)  # type: ignore[arg-type]
    await counts.start()
    try:
        await _settle()
        counts.refresh_soon()
        await _settle()
        assert store.passes == 1
        clock.advance(int(MIN_ASKED_PASS_INTERVAL_S * 1000))
        counts.refresh_soon()
        await _settle()
        assert store.passes == 2
    finally:
        await counts.stop()
