"""The job runner's paused shards (their database server is unreachable), on the memory twin and a
manual clock: a paused shard neither fires nor commits, the others fire on time, and a resumed shard
is reloaded and fires what came due meanwhile; a reload that fails leaves it paused until retried.

Topology 2x2x4: shard 1 lives on instance 0, shard 9 on instance 1 (shards 8-15).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import replace

import pytest

from sharding import TaskIdGenerator, Topology
from tjobs.clock import ManualClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.errors import StorageUnavailable
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.firing.runner import JobRunner
from tjobs.model import DeliveryMode, DueTask, Flow, MisfirePolicy, Task, TaskStatus
from tjobs.settings import SchedulerSettings
from tjobs.specs import CallbackSpec, IntervalSpec
from tjobs.stores.memory import MemoryTaskStore

TOPOLOGY = Topology.parse("2x2x4")
T0 = 1_800_000_000_000 - 1_800_000_000_000 % 300_000  # a cycle boundary
SECOND = 1000
HEALTHY_SHARD, LOST_SHARD = 1, 9
LOST_SERVER_SHARDS = frozenset(range(8, 16))
IDS = TaskIdGenerator(TOPOLOGY.shard_count)
_ID_CLOCK = itertools.count(1)


class FlakyLoadStore(MemoryTaskStore):
    """The memory twin whose loads of the lost server's shards fail while ``down`` is set."""

    def __init__(self) -> None:
        super().__init__(TOPOLOGY)
        self.down = False

    async def load_due(
        self,
        shard: int,
        before_ms: int,
        limit: int,
        after: tuple[int, int] | None = None,
        skip: tuple[int, int] | None = None,
    ) -> list[DueTask]:
        if self.down and shard in LOST_SERVER_SHARDS:
            raise StorageUnavailable("database server 1 is unavailable")
        return await super().load_due(shard, before_ms, limit, after, skip)


class Harness:
    def __init__(self, store: MemoryTaskStore) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.sent: list[Flow] = []
        settings = SchedulerSettings(tick_ms=10, cycle_s=300, load_lead_s=30, misfire_threshold_s=60)
        self.coordinator = LocalCoordinator(TOPOLOGY.shard_count)
        self.runner = JobRunner(
            store,
            self.coordinator,
            FirePlanner(FirePolicy(60 * SECOND, 100)),
            lambda _task, flow: self.sent.append(flow),
            settings,
            self.clock,
            committers=2,
        )

    async def start(self) -> None:
        await self.runner.start()
        await self.coordinator.start(self.runner.set_owned)

    def sent_instants(self, task: Task) -> list[int]:
        return [f.scheduled_at_ms - T0 for f in self.sent if f.task_id == task.id]

    async def move_to(self, offset_ms: int, until: Callable[[], bool] | None = None) -> None:
        self.clock.set(T0 + offset_ms)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if self.runner.backlog == 0 and (until is None or until()):
                await asyncio.sleep(0.03)
                return
        raise AssertionError(f"runner did not settle at T0 + {offset_ms} ms")


def fired(h: Harness, task: Task, offset_ms: int) -> Callable[[], bool]:
    return lambda: offset_ms in h.sent_instants(task)


async def add_task(store: MemoryTaskStore, shard: int) -> Task:
    task = Task(
        id=IDS.mint(shard, T0 - 60_000 + next(_ID_CLOCK)),
        app_id="app",
        name=f"s{shard}",
        key=None,
        schedule=IntervalSpec(SECOND, T0 + SECOND),
        callback=CallbackSpec(("https://receiver.example/hook",)),
        payload=None,
        misfire_policy=MisfirePolicy.FIRE_SOON,
        delivery=DeliveryMode.AT_LEAST_ONCE,
        status=TaskStatus.ACTIVE,
        next_run_at_ms=T0 + SECOND,
        version=1,
        fire_count=0,
        created_at_ms=T0 - 60_000,
        updated_at_ms=T0 - 60_000,
    )
    return await store.insert_task(task)


async def test_a_paused_shard_neither_fires_nor_commits_and_resumes_with_what_came_due() -> None:
    store = FlakyLoadStore()
    h = Harness(store)
    healthy = await add_task(store, HEALTHY_SHARD)
    lost = await add_task(store, LOST_SHARD)
    await h.start()
    try:
        # Given the lost server's shards paused
        await h.runner.set_paused(LOST_SERVER_SHARDS)
        assert h.runner.wheel.get(lost.id) is None

        # When time runs through three instants
        for second in (1, 2, 3):
            await h.move_to(second * SECOND, until=fired(h, healthy, second * SECOND))

        # Then the healthy shard fired each on time and the paused one nothing, not even a flow
        assert h.sent_instants(healthy) == [1 * SECOND, 2 * SECOND, 3 * SECOND]
        assert h.sent_instants(lost) == []
        assert await store.list_flows(lost.id, 10) == []
        # And a change to a paused shard's task does not enter the wheel either
        assert h.runner.wheel.get(lost.id) is None

        # When its server answers again, the shard is reloaded and fires what came due, in order
        await h.runner.set_paused(frozenset())
        await h.move_to(3 * SECOND + 500, until=lambda: len(h.sent_instants(lost)) >= 3)
        assert h.sent_instants(lost)[:3] == [1 * SECOND, 2 * SECOND, 3 * SECOND]
    finally:
        await h.runner.stop()


async def test_a_resume_whose_reload_fails_stays_paused_until_retried() -> None:
    store = FlakyLoadStore()
    h = Harness(store)
    lost = await add_task(store, LOST_SHARD)
    await h.start()
    try:
        await h.runner.set_paused(LOST_SERVER_SHARDS)
        store.down = True  # the server flaps: answers a ping, fails the reload

        with pytest.raises(StorageUnavailable):
            await h.runner.set_paused(frozenset())
        assert h.runner.paused == LOST_SERVER_SHARDS
        await h.move_to(1 * SECOND)
        assert h.sent_instants(lost) == []

        store.down = False
        await h.runner.set_paused(frozenset())  # the health check hands the same set again
        assert h.runner.paused == frozenset()
        await h.move_to(1 * SECOND + 100, until=lambda: h.sent_instants(lost) == [1 * SECOND])
    finally:
        await h.runner.stop()


class HangingLoadStore(MemoryTaskStore):
    """The memory twin whose loads of the lost server's shards hang while ``frozen`` (a SIGSTOPped
    server: the query waits for an answer that does not come)."""

    def __init__(self) -> None:
        super().__init__(TOPOLOGY)
        self.frozen = False
        self.hanging = 0

    async def load_due(
        self,
        shard: int,
        before_ms: int,
        limit: int,
        after: tuple[int, int] | None = None,
        skip: tuple[int, int] | None = None,
    ) -> list[DueTask]:
        if self.frozen and shard in LOST_SERVER_SHARDS:
            self.hanging += 1
            await asyncio.Event().wait()
        return await super().load_due(shard, before_ms, limit, after, skip)


async def test_a_cycle_load_hung_on_a_frozen_server_does_not_hold_up_the_next_cycles_of_the_others() -> None:
    store = HangingLoadStore()
    h = Harness(store)
    healthy = await add_task(store, HEALTHY_SHARD)
    # a healthy task whose next instant opens the cycle after next (T0 + 600 s)
    later = await store.update_task(replace(healthy, next_run_at_ms=T0 + 600 * SECOND, version=2), 1)
    assert later is not None
    await add_task(store, LOST_SHARD)
    await h.start()
    try:
        # Given the lost server froze just before a cycle load: its shards' loads hang
        store.frozen = True
        await h.move_to(275 * SECOND, until=lambda: store.hanging > 0)
        # When the health check pauses its shards
        await h.runner.set_paused(LOST_SERVER_SHARDS)

        # Then the next cycle still loads the healthy shards and the task fires on time
        await h.move_to(575 * SECOND)
        await h.move_to(600 * SECOND, until=fired(h, later, 600 * SECOND))
        assert h.sent_instants(later) == [600 * SECOND]
    finally:
        await h.runner.stop()
