"""The DB-poll hot tier's log lives in logical database 0 (the server holding the apps table): a create's
publish must not wait on that server while it is frozen (issue 28 item 1).

The change is a hint (the cycle load reads the truth, invariant 7), and nobody can read the log of a frozen
server anyway: a publish stops waiting once the write in flight has run ``dbpoll.PUBLISH_WAIT_S``, and the
change stays queued and is written once the server answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from tjobs.clock import SystemClock
from tjobs.hot_tier import dbpoll
from tjobs.hot_tier.base import TaskChange
from tjobs.hot_tier.dbpoll import DbPollHotTier
from tjobs.stores.contracts.hot_changes import HotChange
from tjobs.stores.memory_hot_changes import MemoryHotChangeLog, MemoryHotChanges

WALL_S = 3.0  # a publish that has not returned by then waits on the frozen server


class FreezableLog(MemoryHotChangeLog):
    """The twin's log whose writes hang while :attr:`answering` is clear (a SIGSTOPped server)."""

    def __init__(self, shared: MemoryHotChanges) -> None:
        super().__init__(shared)
        self.answering = asyncio.Event()
        self.answering.set()

    async def append(self, changes: Sequence[HotChange]) -> None:
        await self.answering.wait()
        await super().append(changes)


async def test_a_publish_waits_for_a_frozen_log_server_at_most_the_publish_wait_and_its_change_is_written_later(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dbpoll, "PUBLISH_WAIT_S", 0.3)
    shared = MemoryHotChanges()
    log = FreezableLog(shared)
    clock = SystemClock()
    tier = DbPollHotTier(log, origin="node-a", clock=clock, near_ms=60_000, poll_interval_ms=20)
    applied: list[TaskChange] = []
    await tier.start(applied.append)
    try:
        # Given the log's server frozen
        log.answering.clear()
        changes = [TaskChange(task_id, "app", clock.now_ms() + 1_000, 1) for task_id in (1, 2, 3)]
        loop = asyncio.get_running_loop()
        with caplog.at_level(logging.WARNING, logger="tjobs.hot_tier"):
            # When near-term creates publish their changes
            took_s: list[float] = []
            for change in changes:
                started_s = loop.time()
                try:
                    await asyncio.wait_for(tier.publish(change), WALL_S)
                except TimeoutError:
                    pytest.fail(f"publish still waiting after {WALL_S} s on the frozen log server")
                took_s.append(loop.time() - started_s)
            # Then the first returns after the publish wait, the later ones without waiting again (the
            # write in flight has outlived it), each applied on this node
            assert dbpoll.PUBLISH_WAIT_S * 0.9 <= took_s[0] < dbpoll.PUBLISH_WAIT_S + 0.5, took_s
            assert sum(took_s[1:]) < dbpoll.PUBLISH_WAIT_S, took_s
            assert applied == changes
        stalled = [r for r in caplog.records if getattr(r, "action", None) == "hot_publish_stalled"]
        assert len(stalled) == 1, "logged once per stalled write, not per publish"
        # And once the server answers, every change is in the log, in order
        log.answering.set()
        for _ in range(100):
            if len(shared.rows) == len(changes):
                break
            await asyncio.sleep(0.01)
        assert [row.task_id for _, row in sorted(shared.rows.items())] == [1, 2, 3]
    finally:
        log.answering.set()
        await tier.stop()
