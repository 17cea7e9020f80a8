"""The cycle load on the in-memory store and a manual clock: what it reads, and why what it skips is safe.

Cycle 300 s, lead 30 s, the runner started at T0 (a cycle boundary): the first load (the take-over of
every shard) reads every task due before T0 + 300 s; the cycle load at T0 + 270 s raises the horizon to
T0 + 600 s and reads, per shard in one statement, the overdue tasks (before T0 + 270 s) and the new
cycle [T0 + 300 s, T0 + 600 s), not [T0 + 270 s, T0 + 300 s), which the first load put in the wheel
already. The store is changed directly, never through :meth:`JobRunner.on_task_change`: a change the hot tier missed
(invariant 7 in docs/design.md).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from sharding import TaskIdGenerator, Topology
from tjobs.clock import ManualClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.cluster.wiring import build_hot_tier
from tjobs.errors import StorageUnavailable
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.firing.runner import JobRunner
from tjobs.hot_tier.base import HotTier
from tjobs.hot_tier.local import LocalHotTier
from tjobs.model import DeliveryMode, DueTask, Flow, MisfirePolicy, Task, TaskStatus
from tjobs.settings import SchedulerSettings, load_settings
from tjobs.specs import CallbackSpec, IntervalSpec
from tjobs.stores.memory import MemoryTaskStore

TOPOLOGY = Topology.parse("2x2x4")
T0 = 1_800_000_000_000 - 1_800_000_000_000 % 300_000  # a cycle boundary: the first horizon is T0 + 300 s
SECOND = 1000
CYCLE_LOAD_AT = 270 * SECOND  # T0 + 300 s - the 30-s lead
IDS = TaskIdGenerator(TOPOLOGY.shard_count)
_ID_CLOCK = itertools.count(1)


@dataclass(frozen=True, slots=True)
class LoadCall:
    shard: int
    skip: tuple[int, int] | None
    before_ms: int
    returned: tuple[int, ...]  # task ids


class SpyStore(MemoryTaskStore):
    """The memory twin, recording what each ``load_due`` returned; ``fail_loads`` makes the next
    that many calls fail (a database server not answering)."""

    def __init__(self) -> None:
        super().__init__(TOPOLOGY)
        self.calls: list[LoadCall] = []
        self.fail_loads = 0

    async def load_due(
        self,
        shard: int,
        before_ms: int,
        limit: int,
        after: tuple[int, int] | None = None,
        skip: tuple[int, int] | None = None,
    ) -> list[DueTask]:
        if self.fail_loads > 0:
            self.fail_loads -= 1
            raise StorageUnavailable("database server 0 is unavailable")
        page = await super().load_due(shard, before_ms, limit, after, skip)
        self.calls.append(LoadCall(shard, skip, before_ms, tuple(due.task_id for due in page)))
        return page

    def read_ids(self) -> list[int]:
        return [task_id for call in self.calls for task_id in call.returned]


class Harness:
    def __init__(self, hot_tier: HotTier | None = None) -> None:
        # The runner of a node without a cluster: its in-process hot tier hears every change
        self.hot_tier = hot_tier or LocalHotTier(sole_node=True)
        self.store = SpyStore()
        self.clock = ManualClock(T0)
        self.sent: list[Flow] = []
        settings = SchedulerSettings(tick_ms=10, cycle_s=300, load_lead_s=30, misfire_threshold_s=60)
        self.coordinator = LocalCoordinator(TOPOLOGY.shard_count)
        self.runner = JobRunner(
            self.store,
            self.coordinator,
            FirePlanner(FirePolicy(60 * SECOND, 100)),
            lambda _task, flow: self.sent.append(flow),
            settings,
            self.clock,
            committers=2,
            hot_tier=self.hot_tier,
        )

    async def start(self) -> None:
        await self.runner.start()
        await self.coordinator.start(self.runner.set_owned)

    def sent_instants(self, task: Task) -> list[int]:
        return [f.scheduled_at_ms - T0 for f in self.sent if f.task_id == task.id]

    async def move_to(self, offset_ms: int, until: Callable[[], bool] | None = None) -> None:
        """Set the clock to ``T0 + offset_ms`` and let the runner work (until ``until()`` holds)."""
        self.clock.set(T0 + offset_ms)
        for _ in range(300):
            await asyncio.sleep(0.01)
            if self.runner.backlog == 0 and (until is None or until()):
                await asyncio.sleep(0.03)  # a commit in flight finishes
                return
        raise AssertionError(f"runner did not settle at T0 + {offset_ms} ms")

    async def cycle_load(self, offset_ms: int) -> None:
        """Move to ``T0 + offset_ms`` (at or after a cycle load's wake-up) and wait for that load to end:
        every shard's last read, up to the new horizon, answered."""
        target = self.runner.horizon_ms + 300 * SECOND
        seen = len(self.store.calls)

        def loaded() -> bool:
            done = {c.shard for c in self.store.calls[seen:] if c.before_ms == target}
            return self.runner.horizon_ms == target and done == self.runner.firing_jobs()

        await self.move_to(offset_ms, until=loaded)


async def add_task(
    store: MemoryTaskStore, shard: int, at_ms: int, policy: MisfirePolicy = MisfirePolicy.FIRE_NOW
) -> Task:
    """A task of ``shard`` firing at ``T0 + at_ms`` and then once every hour."""
    task = Task(
        id=IDS.mint(shard, T0 - 60_000 + next(_ID_CLOCK)),
        app_id="app",
        name=f"s{shard}-{at_ms}",
        key=None,
        schedule=IntervalSpec(3_600 * SECOND, T0 + at_ms),
        callback=CallbackSpec(("https://receiver.example/hook",)),
        payload=None,
        misfire_policy=policy,
        delivery=DeliveryMode.AT_LEAST_ONCE,
        status=TaskStatus.ACTIVE,
        next_run_at_ms=T0 + at_ms,
        version=1,
        fire_count=0,
        created_at_ms=T0 - 60_000,
        updated_at_ms=T0 - 60_000,
    )
    return await store.insert_task(task)


async def test_a_cycle_load_reads_the_overdue_and_the_new_cycle_not_what_it_loaded_before() -> None:
    h = Harness()
    shards = list(TOPOLOGY.shards())
    # Given tasks due in the last 30 s of the cycle, loaded by the first load and not due yet when the
    # cycle load runs, tasks of the next cycle, and tasks of the cycle after
    loaded = [await add_task(h.store, shards[i % len(shards)], (271 + i % 29) * SECOND) for i in range(40)]
    next_cycle = [await add_task(h.store, shards[i % len(shards)], (301 + 7 * i) * SECOND) for i in range(10)]
    later = [await add_task(h.store, shards[i % len(shards)], (600 + i) * SECOND) for i in range(5)]
    await h.start()
    try:
        assert set(h.store.read_ids()) == {t.id for t in loaded}  # the take-over read them all
        assert all(h.runner.wheel.get(t.id) is not None for t in loaded)
        # and one task the hot tier missed, overdue when the cycle load runs (not in the wheel)
        overdue = await add_task(h.store, shards[3], 200 * SECOND)
        assert h.runner.wheel.get(overdue.id) is None
        h.store.calls.clear()

        # When the cycle load runs
        await h.cycle_load(CYCLE_LOAD_AT)

        # Then it read the overdue task and the new cycle, each once, and none of the 40 loaded
        # before: they stay in the wheel as the first load put them
        read = h.store.read_ids()
        assert sorted(read) == sorted([overdue.id] + [t.id for t in next_cycle])
        assert not {t.id for t in loaded} & set(read)
        assert not {t.id for t in later} & set(read)
        # one statement per shard: before the new horizon, not [the load's start, old horizon)
        assert {(c.skip, c.before_ms) for c in h.store.calls} == {
            ((T0 + CYCLE_LOAD_AT, T0 + 300 * SECOND), T0 + 600 * SECOND)
        }
        assert sorted(c.shard for c in h.store.calls) == shards
        assert all(h.runner.wheel.get(t.id) is not None for t in next_cycle)
        await h.move_to(CYCLE_LOAD_AT, until=lambda: h.sent_instants(overdue) == [200 * SECOND])

        # and everything fires at its instant
        await h.move_to(300 * SECOND, until=lambda: len(h.sent) == 41)
        assert sorted(f.scheduled_at_ms - T0 for f in h.sent if f.task_id != overdue.id) == sorted(
            t.next_run_at_ms - T0 for t in loaded if t.next_run_at_ms is not None
        )
    finally:
        await h.runner.stop()


async def test_a_task_created_in_the_skipped_span_that_the_hot_tier_missed_fires_late_not_never() -> None:
    h = Harness()
    await h.start()
    try:
        # Given a task created after the first load, due in the span the cycle load skips (not
        # loaded: the hot tier missed its creation)
        missed = await add_task(h.store, 5, 285 * SECOND)
        await h.cycle_load(CYCLE_LOAD_AT)
        assert h.runner.wheel.get(missed.id) is None
        await h.move_to(299 * SECOND)

        # When the next cycle load runs (T0 + 570 s, after the skipped span ended at T0 + 300 s)
        await h.cycle_load(570 * SECOND)

        # Then it read the task as overdue and fired its instant, late (under its misfire policy)
        await h.move_to(571 * SECOND, until=lambda: h.sent_instants(missed) == [285 * SECOND])
        [flow] = [f for f in h.sent if f.task_id == missed.id]
        assert flow.created_at_ms == T0 + 570 * SECOND
    finally:
        await h.runner.stop()


async def test_with_a_hot_tier_that_can_miss_changes_every_cycle_load_reads_everything_below_its_horizon() -> None:
    # A cluster's hot tier (Redis, the DB poll, or an in-process one that other nodes' changes do not
    # reach) can lose a change: the cycle load then reads the span it loaded before again, so a change
    # lost there waits at most for that load, not for the one after it (tests/cluster/test_hot_tier.py).
    h = Harness(hot_tier=LocalHotTier())
    await h.start()
    try:
        # Given a task created after the first load, due in the cycle load's lead (the hot tier lost it)
        missed = await add_task(h.store, 5, 285 * SECOND)
        assert h.runner.wheel.get(missed.id) is None

        # When the cycle load runs
        h.store.calls.clear()
        await h.cycle_load(CYCLE_LOAD_AT)

        # Then it read everything below the new horizon and the task fires at its instant
        assert {(c.skip, c.before_ms) for c in h.store.calls} == {(None, T0 + 600 * SECOND)}
        assert missed.id in h.store.read_ids()
        await h.move_to(285 * SECOND, until=lambda: h.sent_instants(missed) == [285 * SECOND])
        [flow] = [f for f in h.sent if f.task_id == missed.id]
        assert flow.created_at_ms == T0 + 285 * SECOND
    finally:
        await h.runner.stop()


async def test_a_loaded_task_moved_later_behind_the_hot_tiers_back_fires_at_its_new_instant_only() -> None:
    h = Harness()
    task = await add_task(h.store, 9, 280 * SECOND)
    await h.start()
    try:
        # Given a task loaded for T0 + 280 s, moved to T0 + 290 s in the store (version 2) with the
        # hot tier missing the change, and a cycle load that skips it: the wheel holds version 1
        moved = await h.store.update_task(replace(task, next_run_at_ms=T0 + 290 * SECOND, version=2), 1)
        assert moved.version == 2
        await h.cycle_load(CYCLE_LOAD_AT)
        entry = h.runner.wheel.get(task.id)
        assert entry is not None and (entry.scheduled_at_ms, entry.version) == (T0 + 280 * SECOND, 1)

        # When the stale entry's instant comes: its compare-and-set is rejected and the task re-read
        await h.move_to(280 * SECOND, until=lambda: h.runner.stats.reconciled == 1)
        assert h.runner.stats.cas_rejected == 1 and h.sent == []

        # Then it fires at its new instant, once
        await h.move_to(290 * SECOND, until=lambda: len(h.sent) == 1)
        assert h.sent_instants(task) == [290 * SECOND]
    finally:
        await h.runner.stop()


async def test_take_over_resume_and_reload_read_everything_below_the_horizon() -> None:
    h = Harness()
    shard = 13
    soon = await add_task(h.store, shard, 290 * SECOND)
    next_cycle = await add_task(h.store, shard, 400 * SECOND)
    await h.start()
    try:
        await h.cycle_load(CYCLE_LOAD_AT)  # the horizon is T0 + 600 s now
        everything = {soon.id, next_cycle.id}

        # a job lost and taken over again: the take-over reads all of it
        owned = h.runner.owned
        await h.runner.set_owned(owned - {shard})
        assert h.runner.wheel.get(soon.id) is None
        h.store.calls.clear()
        await h.runner.set_owned(owned)
        assert set(h.store.read_ids()) == everything
        assert {(c.shard, c.skip, c.before_ms) for c in h.store.calls} == {(shard, None, T0 + 600 * SECOND)}

        # a shard paused for its database server and resumed
        await h.runner.set_paused(frozenset({shard}))
        h.store.calls.clear()
        await h.runner.set_paused(frozenset())
        assert set(h.store.read_ids()) == everything
        assert {(c.skip, c.before_ms) for c in h.store.calls} == {(None, T0 + 600 * SECOND)}

        # reload (an app enabled again)
        h.store.calls.clear()
        await h.runner.reload()
        assert set(h.store.read_ids()) == everything
        assert {(c.skip, c.before_ms) for c in h.store.calls} == {(None, T0 + 600 * SECOND)}

        await h.move_to(290 * SECOND, until=lambda: len(h.sent) == 1)
        assert h.sent_instants(soon) == [290 * SECOND]
    finally:
        await h.runner.stop()


async def test_the_first_cycle_load_after_a_restart_reads_everything() -> None:
    # A runner stopped and started again keeps its jobs (no take-over load) and starts from the
    # cycle's horizon: its first cycle load cannot count on what the wheel holds.
    h = Harness()
    shard = 1
    soon = await add_task(h.store, shard, 290 * SECOND)
    await h.start()
    try:
        await h.move_to(250 * SECOND)
        await h.runner.stop()
        await h.runner.start()
        h.store.calls.clear()
        await h.cycle_load(CYCLE_LOAD_AT)
        assert soon.id in h.store.read_ids()
        assert {(c.skip, c.before_ms) for c in h.store.calls} == {(None, T0 + 600 * SECOND)}
        # and the one after skips again
        h.store.calls.clear()
        await h.cycle_load(570 * SECOND)
        assert {(c.skip, c.before_ms) for c in h.store.calls} == {
            ((T0 + 570 * SECOND, T0 + 600 * SECOND), T0 + 900 * SECOND)
        }
    finally:
        await h.runner.stop()


async def test_a_failed_cycle_load_is_retried_and_still_loads_the_new_cycle() -> None:
    h = Harness()
    soon = await add_task(h.store, 1, 290 * SECOND)
    new = [await add_task(h.store, shard, 310 * SECOND) for shard in TOPOLOGY.shards()]
    await h.start()
    try:
        # Given a cycle load that fails part way (the horizon is put back), retried a second later
        h.store.fail_loads = 3
        h.store.calls.clear()
        await h.cycle_load(CYCLE_LOAD_AT + SECOND)
        assert h.store.fail_loads == 0
        # Then the retry read every task of the new cycle, and nothing fires twice
        assert {t.id for t in new} <= set(h.store.read_ids())
        assert soon.id not in h.store.read_ids()
        await h.move_to(310 * SECOND, until=lambda: len(h.sent) == 1 + len(new))
        assert sorted(f.task_id for f in h.sent) == sorted([soon.id] + [t.id for t in new])
    finally:
        await h.runner.stop()


def test_only_the_hot_tier_of_a_node_without_a_cluster_is_complete() -> None:
    # A cluster node's tiers (Redis, the DB poll, or "off": changes reach other nodes at their cycle
    # load) can lose a change, so its cycle loads read everything below the horizon.
    cluster = {"etcd_endpoints": ["http://127.0.0.1:2379"], "redis_url": "redis://127.0.0.1:6379/0"}
    tiers = {
        tier: build_hot_tier(
            load_settings(None, cluster={**cluster, "hot_tier": tier}), "n1", ManualClock(T0), MemoryTaskStore()
        )
        for tier in ("redis", "dbpoll", "off")
    }
    assert {tier: hot_tier.complete for tier, hot_tier in tiers.items()} == dict.fromkeys(tiers, False)
    assert LocalHotTier(sole_node=True).complete
