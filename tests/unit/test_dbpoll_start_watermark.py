"""The DB-poll hot tier receives every change logged after its ``start`` returned.

A node's poll begins above the log's highest id. That id used to be read by the poll task's first turn,
after ``start`` had returned, so a change another process logged in between (a create published while
the node was still starting) fell below the watermark and was never received: the clean-clone CI run of
2026-12-05 failed the hot-tier contract case where a second process of a node's name must get the
publisher's 50 changes (none arrived in 5 s; MariaDB, where that first read is slowest).
"""

from __future__ import annotations

import asyncio
import contextlib

from tjobs.clock import SystemClock
from tjobs.hot_tier.base import TaskChange
from tjobs.hot_tier.dbpoll import DbPollHotTier
from tjobs.stores.memory_hot_changes import MemoryHotChangeLog, MemoryHotChanges

EVERY_SHARD = frozenset(range(512))
SLOW_READ_S = 0.2  # the log's first read of its highest id takes this long (a new connection, a busy server)


class SlowFirstReadLog(MemoryHotChangeLog):
    """The twin's log whose highest id answers after :data:`SLOW_READ_S`, as of when it answers."""

    async def highest_id(self) -> int:
        await asyncio.sleep(SLOW_READ_S)
        return await super().highest_id()


async def test_a_change_logged_right_after_start_returned_is_received() -> None:
    shared = MemoryHotChanges()
    clock = SystemClock()
    reader = DbPollHotTier(SlowFirstReadLog(shared), origin="node-b", clock=clock, near_ms=60_000, poll_interval_ms=20)
    writer = DbPollHotTier(
        MemoryHotChangeLog(shared), origin="node-a", clock=clock, near_ms=60_000, poll_interval_ms=20
    )
    received: list[TaskChange] = []
    await writer.start(lambda change: None)
    # Given a node whose start has returned, watching every shard
    await reader.start(received.append)
    await reader.watch(EVERY_SHARD)
    try:
        # When another process logs a change at once
        change = TaskChange(7, "app", clock.now_ms() + 1_000, 1)
        await writer.publish(change)
        # Then the node receives it
        for _ in range(100):
            if change in received:
                break
            await asyncio.sleep(0.02)
        assert received == [change]
    finally:
        await reader.stop()
        await writer.stop()


class ClosingCountedLog(SlowFirstReadLog):
    """:class:`SlowFirstReadLog` that counts its opens and closes (``was_opened`` set at the first)."""

    opened = 0
    closed = 0

    def __init__(self, changes: MemoryHotChanges) -> None:
        super().__init__(changes)
        self.was_opened = asyncio.Event()

    async def open(self) -> None:
        await super().open()
        self.opened += 1
        self.was_opened.set()

    async def close(self) -> None:
        await super().close()
        self.closed += 1


async def test_a_start_cancelled_after_the_log_opened_closes_it() -> None:
    # a node start cancelled (a test's timeout, a stop during start) while the tier reads its watermark: the
    # node never registered the tier's stop, so the tier closes what it opened (an engine left to the
    # garbage collector: aiosqlite's ResourceWarning in a later test)
    log = ClosingCountedLog(MemoryHotChanges())
    tier = DbPollHotTier(log, origin="node-a", clock=SystemClock(), near_ms=60_000, poll_interval_ms=20)
    starting = asyncio.create_task(tier.start(lambda change: None))
    await log.was_opened.wait()
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    assert (log.opened, log.closed) == (1, 1)
