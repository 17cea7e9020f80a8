"""The job runner on the in-memory store and a manual clock: what a fire commit that fails on one
database server does to the fires of the others.

Topology 2x2x4: shards 1 and 5 live on instance 0, shards 9 and 13 on instance 1; the memory twin runs
one fire transaction per instance, like the SQL store runs one per server. A fault injected through the
planner makes one instance's transaction fail, exactly where a lost connection, a lock wait timeout or a
closing fence would.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence

from sharding import TaskIdGenerator, Topology, shard_of_task_id
from tjobs.clock import ManualClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.errors import Fenced, StaleShardMap, StorageUnavailable
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.firing.runner import JobRunner
from tjobs.model import (
    DeliveryMode,
    FireIntent,
    FireOutcome,
    FirePlan,
    Flow,
    FlowKind,
    MisfirePolicy,
    Task,
    TaskStatus,
)
from tjobs.settings import SchedulerSettings
from tjobs.specs import CallbackSpec, schedule_from_json
from tjobs.stores.base import FirePlanner as Planner
from tjobs.stores.memory import MemoryTaskStore

TOPOLOGY = Topology.parse("2x2x4")
T0 = 1_800_000_000_000 - 1_800_000_000_000 % 300_000  # a cycle boundary: the horizon is T0 + 300 s
SECOND = 1000
HEALTHY_SHARD, FAILING_SHARD = 1, 9  # instance 0, instance 1
IDS = TaskIdGenerator(TOPOLOGY.shard_count)
_ID_CLOCK = itertools.count(1)


class FaultyServerStore(MemoryTaskStore):
    """The memory twin, with instance 1's fire transactions failing while ``fault`` is set."""

    def __init__(self) -> None:
        super().__init__(TOPOLOGY)
        self.fault: Exception | None = None
        self.calls = 0

    async def commit_fires(
        self,
        intents: Sequence[FireIntent],
        now_ms: int,
        planner: Planner,
        may_commit: Callable[[], bool] | None = None,
    ) -> list[FireOutcome]:
        self.calls += 1

        def faulty(task: Task, intent: FireIntent, plan_now_ms: int) -> FirePlan | None:
            if self.fault is not None and TOPOLOGY.locate(shard_of_task_id(task.id)).instance == 1:
                raise self.fault
            return planner(task, intent, plan_now_ms)

        return await super().commit_fires(intents, now_ms, faulty, may_commit)


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

    async def stop(self) -> None:
        await self.runner.stop()

    def sent_instants(self, task: Task) -> list[int]:
        return [f.scheduled_at_ms - T0 for f in self.sent if f.task_id == task.id]

    async def move_to(self, offset_ms: int, until: Callable[[], bool] | None = None) -> None:
        """Set the clock to ``T0 + offset_ms`` and let the runner work (until ``until()`` holds)."""
        self.clock.set(T0 + offset_ms)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if self.runner.backlog == 0 and (until is None or until()):
                await asyncio.sleep(0.03)  # a commit in flight finishes
                return
        raise AssertionError(f"runner did not settle at T0 + {offset_ms} ms")


def fired_at(h: Harness, tasks: list[Task], offset_ms: int) -> Callable[[], bool]:
    return lambda: all(offset_ms in h.sent_instants(task) for task in tasks)


def called_more_than(store: FaultyServerStore, calls: int) -> Callable[[], bool]:
    return lambda: store.calls > calls


async def add_task(store: MemoryTaskStore, shard: int, every_s: int = 1, max_fires: int | None = None) -> Task:
    schedule: dict[str, object] = {"kind": "interval", "every_ms": every_s * SECOND, "start_at_ms": T0 + SECOND}
    if max_fires is not None:
        schedule["max_fires"] = max_fires
    task = Task(
        id=IDS.mint(shard, T0 - 60_000 + next(_ID_CLOCK)),
        app_id="app",
        name=f"s{shard}",
        key=None,
        schedule=schedule_from_json(schedule),
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


async def test_a_fire_committed_on_one_server_is_delivered_when_another_servers_transaction_fails() -> None:
    # Given interval tasks on two servers, and server 1's transactions failing
    store = FaultyServerStore()
    h = Harness(store)
    healthy = await add_task(store, HEALTHY_SHARD)
    failing = await add_task(store, FAILING_SHARD)
    await h.start()
    try:
        store.fault = StorageUnavailable("database server 1 is unavailable")

        # When both come due in one batch
        await h.move_to(1 * SECOND, until=lambda: store.calls >= 1)

        # Then the healthy server's fire is delivered at once and its next instant is in the wheel
        assert h.sent_instants(healthy) == [1 * SECOND]
        entry = h.runner.wheel.get(healthy.id)
        assert entry is not None and entry.scheduled_at_ms == T0 + 2 * SECOND
        # And the failed one waits in the wheel for a retry of its own, nothing of it written
        assert h.sent_instants(failing) == []
        retry = h.runner.wheel.get(failing.id)
        assert retry is not None and (retry.scheduled_at_ms, retry.version) == (T0 + SECOND, 1)
        assert retry.fire_at_ms > T0 + SECOND
        assert await store.list_flows(failing.id, 10) == []

        # When server 1 recovers, the retry fires the failed instant once, and both go on on time
        store.fault = None
        await h.move_to(retry.fire_at_ms - T0, until=lambda: h.sent_instants(failing) == [1 * SECOND])
        await h.move_to(2 * SECOND, until=lambda: len(h.sent) == 4)
        assert h.sent_instants(healthy) == [1 * SECOND, 2 * SECOND]
        assert h.sent_instants(failing) == [1 * SECOND, 2 * SECOND]
        for task in (healthy, failing):
            flows = await store.list_flows(task.id, 10)
            assert sorted(f.scheduled_at_ms - T0 for f in flows) == [1 * SECOND, 2 * SECOND]
            assert all(f.kind is FlowKind.SCHEDULED for f in flows)
        assert h.runner.stats.cas_rejected == 0
    finally:
        await h.stop()


async def test_a_task_on_a_healthy_server_keeps_to_its_window_while_another_server_fails() -> None:
    # Given a task that fires 3 times (every second) on server 0, and server 1 failing throughout
    store = FaultyServerStore()
    h = Harness(store)
    bounded = await add_task(store, HEALTHY_SHARD, max_fires=3)
    await add_task(store, FAILING_SHARD)
    await h.start()
    try:
        store.fault = StorageUnavailable("database server 1 is unavailable")

        # When time runs through its window and past the next cycle load (T0 + 270 s)
        for second in range(1, 5):
            await h.move_to(second * SECOND)
        await h.move_to(275 * SECOND)
        await h.move_to(280 * SECOND)

        # Then it fired each of its 3 instants on time, and never after its window
        assert h.sent_instants(bounded) == [1 * SECOND, 2 * SECOND, 3 * SECOND]
        flows = await store.list_flows(bounded.id, 10)
        assert sorted(f.scheduled_at_ms - T0 for f in flows) == [1 * SECOND, 2 * SECOND, 3 * SECOND]
        assert all(f.kind is FlowKind.SCHEDULED and f.missed == 0 for f in flows)
        stored = await store.get_task(bounded.id)
        assert stored is not None and stored.status is TaskStatus.COMPLETED
    finally:
        await h.stop()


async def test_a_fenced_transaction_on_one_server_keeps_the_other_servers_fires() -> None:
    store = FaultyServerStore()
    h = Harness(store)
    healthy = await add_task(store, HEALTHY_SHARD)
    fenced = await add_task(store, FAILING_SHARD)
    await h.start()
    try:
        store.fault = Fenced("the fence closed during the fire transaction; rolled back")
        await h.move_to(1 * SECOND, until=lambda: store.calls >= 1)
        assert h.sent_instants(healthy) == [1 * SECOND]
        assert h.sent_instants(fenced) == []
        assert h.runner.stats.commit_fenced == 1

        # The fenced instant is not lost: once the fence opens it fires, once
        store.fault = None
        await h.move_to(2 * SECOND, until=lambda: len(h.sent) == 4)
        assert h.sent_instants(fenced) == [1 * SECOND, 2 * SECOND]
        assert h.sent_instants(healthy) == [1 * SECOND, 2 * SECOND]
    finally:
        await h.stop()


async def test_the_newest_committed_instant_moves_with_commits_only() -> None:
    # The cluster view shows it; the failover test proves by it that a fenced node committed no instant
    # due after its fence.
    store = FaultyServerStore()
    h = Harness(store)
    healthy = await add_task(store, HEALTHY_SHARD)
    await add_task(store, FAILING_SHARD)
    await h.start()
    try:
        assert h.runner.stats.newest_committed_instant_ms is None
        store.fault = StorageUnavailable("database server 1 is unavailable")
        await h.move_to(1 * SECOND, until=lambda: store.calls >= 1)
        assert h.runner.stats.newest_committed_instant_ms == T0 + SECOND
        await h.move_to(2 * SECOND, until=lambda: h.sent_instants(healthy) == [1 * SECOND, 2 * SECOND])
        await h.move_to(2500, until=lambda: store.calls >= 3)  # the failed instant's retry fails again
        assert h.runner.stats.newest_committed_instant_ms == T0 + 2 * SECOND
    finally:
        await h.stop()


async def test_stop_does_not_wait_out_the_cycle_loops_nap() -> None:
    # The cycle loop naps up to a second between looks at the clock; stopping an idle runner (every
    # node's shutdown, every runner restart) must not wait for the nap to end. It waited 1 s.
    h = Harness(MemoryTaskStore(TOPOLOGY))
    await h.start()
    await asyncio.sleep(0.05)  # the cycle loop is napping
    loop = asyncio.get_running_loop()
    began = loop.time()
    await h.stop()
    assert loop.time() - began < 0.5


class CommitLostStore(MemoryTaskStore):
    """Instance 1's transactions commit, but the answer is lost (the connection dropped during COMMIT)."""

    def __init__(self) -> None:
        super().__init__(TOPOLOGY)
        self.lose_answers = False

    async def commit_fires(
        self,
        intents: Sequence[FireIntent],
        now_ms: int,
        planner: Planner,
        may_commit: Callable[[], bool] | None = None,
    ) -> list[FireOutcome]:
        outcomes = await super().commit_fires(intents, now_ms, planner, may_commit)
        if not self.lose_answers:
            return outcomes
        lost = StorageUnavailable("lost connection to server 1 during COMMIT")
        return [
            FireOutcome(o.intent, None, [], lost)
            if TOPOLOGY.locate(shard_of_task_id(o.intent.task_id)).instance == 1
            else o
            for o in outcomes
        ]


async def test_a_commit_whose_answer_was_lost_is_never_fired_twice_and_its_task_goes_on() -> None:
    # Given a task on server 1 whose commit succeeds but whose answer is lost
    store = CommitLostStore()
    h = Harness(store)
    task = await add_task(store, FAILING_SHARD)
    await h.start()
    try:
        store.lose_answers = True
        await h.move_to(1 * SECOND)
        store.lose_answers = False
        retry = h.runner.wheel.get(task.id)
        assert retry is not None and retry.scheduled_at_ms == T0 + SECOND

        # When the retry finds the instant already fired (its compare-and-set fails)
        await h.move_to(
            retry.fire_at_ms - T0,
            until=lambda: (e := h.runner.wheel.get(task.id)) is not None and e.scheduled_at_ms == T0 + 2 * SECOND,
        )

        # Then no second flow was written, the flow the lost answer committed is delivered (once),
        # and the task's next instant fires on time
        assert h.sent_instants(task) == [1 * SECOND]
        await h.move_to(2 * SECOND, until=lambda: 2 * SECOND in h.sent_instants(task))
        flows = await store.list_flows(task.id, 10)
        assert sorted(f.scheduled_at_ms - T0 for f in flows) == [1 * SECOND, 2 * SECOND]
        assert h.sent_instants(task) == [1 * SECOND, 2 * SECOND]
    finally:
        await h.stop()


async def test_a_failing_server_is_retried_with_growing_delays_and_nothing_is_lost() -> None:
    store = FaultyServerStore()
    h = Harness(store)
    task = await add_task(store, FAILING_SHARD, every_s=60)
    await h.start()
    try:
        store.fault = StorageUnavailable("database server 1 is unavailable")
        delays: list[int] = []
        now_ms = T0 + SECOND
        await h.move_to(now_ms - T0, until=lambda: store.calls >= 1)
        for _ in range(4):
            entry = h.runner.wheel.get(task.id)
            assert entry is not None and entry.scheduled_at_ms == T0 + SECOND
            delays.append(entry.fire_at_ms - now_ms)
            now_ms = entry.fire_at_ms
            await h.move_to(now_ms - T0, until=called_more_than(store, store.calls))
        assert delays == sorted(delays) and delays[-1] > delays[0]
        assert h.sent == []

        store.fault = None
        entry = h.runner.wheel.get(task.id)
        assert entry is not None
        await h.move_to(entry.fire_at_ms - T0, until=lambda: len(h.sent) == 1)
        assert h.sent_instants(task) == [1 * SECOND]
    finally:
        await h.stop()


class StallingServerStore(MemoryTaskStore):
    """Instance 1's fire transactions hang (a row lock, a frozen server) until ``resume`` is set."""

    def __init__(self) -> None:
        super().__init__(TOPOLOGY)
        self.stalling = False
        self.resume = asyncio.Event()

    async def commit_fires(
        self,
        intents: Sequence[FireIntent],
        now_ms: int,
        planner: Planner,
        may_commit: Callable[[], bool] | None = None,
    ) -> list[FireOutcome]:
        on_instance_1 = [TOPOLOGY.locate(shard_of_task_id(i.task_id)).instance == 1 for i in intents]
        if self.stalling and any(on_instance_1):
            await self.resume.wait()
        return await super().commit_fires(intents, now_ms, planner, may_commit)


async def test_a_stalled_server_delays_neither_the_commits_nor_the_deliveries_of_the_others() -> None:
    # Given tasks on both servers, and server 1's transactions hanging
    store = StallingServerStore()
    h = Harness(store)
    healthy = [await add_task(store, shard) for shard in (1, 5, 1, 5)]
    stalled = [await add_task(store, shard) for shard in (9, 13)]
    await h.start()
    try:
        store.stalling = True

        # When instants come due while server 1 hangs, more of them than the node has committers
        for second in (1, 2, 3):
            await h.move_to(second * SECOND, until=fired_at(h, healthy, second * SECOND))

        # Then server 0's tasks fired each instant on time; nothing of server 1 was delivered yet
        for task in healthy:
            assert h.sent_instants(task) == [1 * SECOND, 2 * SECOND, 3 * SECOND]
        assert all(h.sent_instants(task) == [] for task in stalled)

        # When server 1 answers again, its fires go through once each
        store.resume.set()
        await h.move_to(3 * SECOND + 100, until=lambda: all(h.sent_instants(t) for t in stalled))
        await h.move_to(4 * SECOND, until=lambda: all(4 * SECOND in h.sent_instants(t) for t in stalled))
        for task in stalled:
            flows = await store.list_flows(task.id, 10)
            instants = sorted(f.scheduled_at_ms - T0 for f in flows)
            assert instants == sorted(set(instants)) and instants[0] == 1 * SECOND and instants[-1] == 4 * SECOND
    finally:
        await h.stop()


async def test_a_runner_started_again_after_stop_fires_again() -> None:
    store = FaultyServerStore()
    h = Harness(store)
    tasks = [await add_task(store, shard) for shard in (HEALTHY_SHARD, FAILING_SHARD)]
    await h.start()
    await h.move_to(1 * SECOND, until=fired_at(h, tasks, 1 * SECOND))
    await h.runner.stop()
    await h.runner.start()
    try:
        await h.move_to(2 * SECOND, until=fired_at(h, tasks, 2 * SECOND))
        assert all(h.sent_instants(task) == [1 * SECOND, 2 * SECOND] for task in tasks)
    finally:
        await h.stop()


async def test_intents_a_moving_database_refused_are_committed_as_soon_as_the_shard_map_changes() -> None:
    # Given a task whose database is being moved: its server refuses the fire (the copy is retired)
    # until this node routes by the new map, and the intent waits out a growing retry delay
    store = FaultyServerStore()
    h = Harness(store)
    task = await add_task(store, FAILING_SHARD, every_s=60)
    await h.start()
    try:
        store.fault = StaleShardMap("tjobs_01 refused a write under shard-map epoch 1")
        now_ms = T0 + SECOND
        await h.move_to(now_ms - T0, until=lambda: store.calls >= 1)
        for _ in range(2):
            entry = h.runner.wheel.get(task.id)
            assert entry is not None
            now_ms = entry.fire_at_ms
            await h.move_to(now_ms - T0, until=called_more_than(store, store.calls))
        entry = h.runner.wheel.get(task.id)
        assert entry is not None and entry.fire_at_ms - now_ms >= 2 * SECOND
        # When the node routes by the new map (the database now answers from its new server)
        store.fault = None
        h.runner.servers_changed()
        # Then the fire commits on the next tick, not after the retry delay
        await h.move_to(now_ms - T0 + 10, until=lambda: len(h.sent) == 1)
        assert h.sent_instants(task) == [1 * SECOND]
    finally:
        await h.stop()


class CountingStallingStore(StallingServerStore):
    """Records which tasks each fire transaction carried."""

    def __init__(self) -> None:
        super().__init__()
        self.carried: list[int] = []

    async def commit_fires(
        self,
        intents: Sequence[FireIntent],
        now_ms: int,
        planner: Planner,
        may_commit: Callable[[], bool] | None = None,
    ) -> list[FireOutcome]:
        self.carried += [intent.task_id for intent in intents]
        return await super().commit_fires(intents, now_ms, planner, may_commit)


async def test_a_load_while_a_fire_is_being_committed_does_not_queue_that_fire_again() -> None:
    """A load (a cycle's, or a reload) offers the tasks due before the horizon; one whose fire has left
    the wheel and waits for its commit is not in the wheel, and was queued a second time: two
    transactions for one task, the second waiting on the first's row locks (2 s on MariaDB) before its
    compare-and-set was rejected. The AMQP fire bench saw such a load run 46 s inside its window over a
    backlog of ~100,000 fires (docs/benchmarks.md, issue 14)."""
    store = CountingStallingStore()
    h = Harness(store)
    stalled = await add_task(store, FAILING_SHARD, every_s=60)
    await h.start()
    try:
        store.stalling = True
        h.clock.set(T0 + SECOND)
        for _ in range(100):  # its fire is taken into a transaction, which hangs
            await asyncio.sleep(0.01)
            if stalled.id in store.carried:
                break
        assert store.carried == [stalled.id]

        await h.runner.reload()  # a load while that transaction hangs
        for _ in range(30):
            await asyncio.sleep(0.01)  # ticks: anything queued again would reach a committer
        store.resume.set()
        await h.move_to(SECOND + 100, until=lambda: len(h.sent) == 1)

        assert store.carried == [stalled.id]  # one transaction carried it
        assert h.sent_instants(stalled) == [1 * SECOND]
    finally:
        await h.stop()
