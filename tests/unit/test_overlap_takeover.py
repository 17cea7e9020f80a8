"""Overlap across a change of owner (README "Job runs", docs/pools.md "Overlap"): a node that takes a
shard over (the previous owner killed, or a planned move) learns the live runs of that shard's tasks
from the store before anything of the shard fires (:meth:`tjobs.firing.runner.JobRunner.set_owned`,
:meth:`tjobs.delivery.deliverer.Deliverer.learn_runs`), so its overlap gate skips or queues a fire of a
task whose run is still live, and holds the fire queued behind it (parked in the store); a run that
ends by a report taken on another node releases it. The previous owner, on a move, lets go of the runs
and the queued fires of the shards it lost.

Two nodes (a deliverer and a job runner each, never started: ``set_owned`` loads nothing) on one memory
store; the executors' registry and the transport twin shared; reports written beside them, as a third
node's API would."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from sharding import shard_of_task_id
from tests.delivery_fakes import APP, CLOCK, SETTINGS, NoJitter, settle, stored_flow
from tjobs.clock import ManualClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.pool_dispatcher import PoolDispatcher
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.errors import NotFound
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.firing.runner import JobRunner
from tjobs.model import App, Flow, FlowStatus, Task, parse_flow_id
from tjobs.pools.model import Executor
from tjobs.service.runs import RunService
from tjobs.settings import RunSettings, SchedulerSettings
from tjobs.specs import CallbackSpec
from tjobs.specs.pool import parse_pool_route
from tjobs.stores.memory import MemoryTaskStore

RUN = Answer(202, headers={"tjobs-run": "accepted"})
RUN_TIMEOUT_MS = 60_000
WATCH_S = 0.01


class Apps:
    """The app directory: the one app, always."""

    def cached(self, app_id: str) -> App | None:
        return APP

    async def get(self, app_id: str) -> App:
        return APP


@dataclasses.dataclass
class Node:
    deliverer: Deliverer
    runner: JobRunner


class Rig:
    def __init__(self) -> None:
        self.store = MemoryTaskStore()
        self.clock = ManualClock(CLOCK.now_ms())
        self.registry = LocalCoordinator(4)
        self.transport = RecordingTransport(SETTINGS, self.clock)
        self.transport.script(then=RUN)
        self.runs = RunService(self.store, RunSettings(cancel_grace_s=10), self.clock, self.read_flow)
        self.every = frozenset(self.store.topology.shards())
        self.nodes: list[Node] = []
        self.unreadable = False  # the read of a shard's live runs fails

    async def shards_with_live_runs(self, shards: Sequence[int]) -> set[int]:
        if self.unreadable:
            raise ConnectionError("server gone")
        return await self.store.shards_with_live_runs(shards)

    async def live_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        if self.unreadable:
            raise ConnectionError("server gone")
        return await self.store.live_runs(shard, limit, after)

    async def shards_with_retrying_runs(self, shards: Sequence[int]) -> set[int]:
        if self.unreadable:
            raise ConnectionError("server gone")
        return await self.store.shards_with_retrying_runs(shards)

    async def retrying_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        return await self.store.retrying_runs(shard, limit, after)

    async def parked_behind(self, shard: int, runs: Sequence[tuple[int, int]]) -> list[Flow]:
        return await self.store.parked_behind(shard, runs)

    async def open_flows_of_task(self, app_id: str, task_id: int, limit: int) -> list[Flow]:
        return await self.store.open_flows_of_task(app_id, task_id, limit)

    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None:
        return await self.store.get_flow(task_id, scheduled_at_ms)

    async def node(self, owned: frozenset[int] = frozenset()) -> Node:
        deliverer = Deliverer(
            self.store,
            self.transport,
            AppLimiter(SETTINGS.global_max_in_flight),
            SETTINGS,
            self.clock,
            NoJitter(),
            flush_batch=1,
            status_reader=self.store,
            apps=Apps(),
            run_reader=self,
            pools=PoolDispatcher(self.registry, self.transport),
            run_timeout_ms=RUN_TIMEOUT_MS,
            run_watch_s=WATCH_S,
        )
        runner = JobRunner(
            self.store,
            LocalCoordinator(self.store.topology.shard_count),
            FirePlanner(FirePolicy(60_000, 100)),
            deliverer.deliver,
            SchedulerSettings(tick_ms=10, cycle_s=300, load_lead_s=30, misfire_threshold_s=60),
            self.clock,
            runs=deliverer,
        )
        await deliverer.start()
        made = Node(deliverer, runner)
        self.nodes.append(made)
        await runner.set_owned(owned)
        return made

    async def read_flow(self, app: App, id_: str) -> Flow:
        flow = await self.store.get_flow(*parse_flow_id(id_))
        if flow is None or flow.app_id != app.id:
            raise NotFound("flow", id_)
        return flow

    async def fires(self, overlap: str, count: int) -> tuple[Task, list[Flow]]:
        await self.registry.register_executor(APP.id, "workers", Executor("e0", "http://10.0.0.1:8000", "z1"))
        task, first = await stored_flow(self.store, clock=self.clock)
        spec = CallbackSpec((), pool=parse_pool_route({"name": "workers", "overlap": overlap}))
        task = await self.store.update_task(dataclasses.replace(task, callback=spec), task.version)
        flows = [first]
        for later in range(1, count):
            at_ms = first.scheduled_at_ms + later
            later_flow = dataclasses.replace(first, scheduled_at_ms=at_ms, next_attempt_at_ms=at_ms)
            flows.append(await self.store.insert_manual_flow(task.id, later_flow))
        return task, flows

    async def fire(self, node: Node, task: Task, flow: Flow) -> None:
        node.deliverer.submit(CallbackJob(task, flow, APP))
        await settle()

    async def stored(self, flow: Flow) -> Flow:
        found = await self.store.get_flow(*parse_flow_id(flow.id))
        assert found is not None
        return found

    async def until(self, flow: Flow, *statuses: FlowStatus) -> Flow:
        for _ in range(int(5 / WATCH_S)):
            stored = await self.stored(flow)
            if stored.status in statuses:
                return stored
            await asyncio.sleep(WATCH_S)
        raise AssertionError(f"flow {flow.id} is {stored.status.value}, not one of {statuses}")

    def sent(self) -> list[str]:
        return [request.headers["webhook-id"] for request in self.transport.requests]

    async def report(self, flow: Flow, **fields: Any) -> None:
        await self.runs.report(APP, flow.id, {"attempt": 1, **fields})


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    made = Rig()
    yield made
    for node in made.nodes:
        await node.deliverer.stop(1.0)


async def _running_on_a_node_that_dies(rig: Rig, overlap: str, count: int) -> tuple[Task, list[Flow]]:
    """A run of the task's first flow, live, started by a node that then dies (its memory gone)."""
    first_owner = await rig.node(rig.every)
    task, flows = await rig.fires(overlap, count)
    await rig.fire(first_owner, task, flows[0])
    await rig.until(flows[0], FlowStatus.RUNNING)
    await first_owner.deliverer.stop(0.0)
    return task, flows


async def test_a_successor_skips_a_fire_while_the_run_the_dead_owner_started_lives(rig: Rig) -> None:
    task, (first, second) = await _running_on_a_node_that_dies(rig, "skip_if_running", 2)

    # When another node takes the shard over and the task fires there
    successor = await rig.node(rig.every)
    await rig.fire(successor, task, second)

    # Then the fire is skipped, naming the live run: one run at a time, across the change of owner
    skipped = await rig.until(second, FlowStatus.SKIPPED, FlowStatus.RUNNING)
    assert skipped.status is FlowStatus.SKIPPED
    assert skipped.last_error == f"skipped: flow {first.id} of the task is still running"
    assert rig.sent() == [first.id]


async def test_a_successor_queues_behind_the_run_and_sends_once_another_node_took_its_end(rig: Rig) -> None:
    task, (first, second, third) = await _running_on_a_node_that_dies(rig, "queue_one", 3)
    successor = await rig.node(rig.every)

    # When the task fires twice on the successor while the run lives
    await rig.fire(successor, task, second)
    await rig.fire(successor, task, third)
    await asyncio.sleep(WATCH_S * 5)

    # Then one fire waits, the other is skipped
    assert rig.sent() == [first.id]
    assert (await rig.until(third, FlowStatus.SKIPPED)).last_error == (
        f"skipped: flow {first.id} of the task is still running"
    )
    parked = await rig.stored(second)
    assert parked.status is FlowStatus.PENDING and parked.attempts == 0

    # And once the run's end is reported to another node's API, the waiting fire goes
    await rig.report(first, status="succeeded")
    await rig.until(second, FlowStatus.RUNNING)
    assert rig.sent() == [first.id, second.id]


async def test_a_moved_shard_holds_its_run_and_its_queued_fire_on_the_new_owner(rig: Rig) -> None:
    # Given a live run and a fire queued behind it on the shard's owner
    old = await rig.node(rig.every)
    task, (first, second, third) = await rig.fires("queue_one", 3)
    shard = shard_of_task_id(task.id)
    await rig.fire(old, task, first)
    await rig.until(first, FlowStatus.RUNNING)
    await rig.fire(old, task, second)
    await asyncio.sleep(WATCH_S * 5)  # parked in the store behind the run

    # When the shard moves to another node (the old one lets go first) and the task fires there
    await old.runner.set_owned(rig.every - {shard})
    new = await rig.node(frozenset({shard}))
    await rig.fire(new, task, third)

    # Then the new owner holds the queued fire behind the run, so the later one is skipped
    skipped = await rig.until(third, FlowStatus.SKIPPED, FlowStatus.RUNNING)
    assert skipped.last_error == f"skipped: flow {first.id} of the task is still running"
    assert rig.sent() == [first.id]

    # And once the run ended (reported to another node), the queued fire goes once, from the new owner
    await rig.report(first, status="succeeded")
    await rig.until(second, FlowStatus.RUNNING)
    await asyncio.sleep(WATCH_S * 10)
    assert rig.sent() == [first.id, second.id]


async def test_a_successor_holds_the_fire_the_dead_owner_queued_behind_the_run(rig: Rig) -> None:
    # Given a fire queued behind the live run on the node that dies
    first_owner = await rig.node(rig.every)
    task, (first, second, third) = await rig.fires("queue_one", 3)
    await rig.fire(first_owner, task, first)
    await rig.until(first, FlowStatus.RUNNING)
    await rig.fire(first_owner, task, second)
    await asyncio.sleep(WATCH_S * 5)
    await first_owner.deliverer.stop(0.0)

    # When the successor takes over and the task fires there, the queued fire keeps its place
    successor = await rig.node(rig.every)
    await rig.fire(successor, task, third)
    assert (await rig.until(third, FlowStatus.SKIPPED, FlowStatus.RUNNING)).status is FlowStatus.SKIPPED

    # And goes once the run ended
    await rig.report(first, status="succeeded")
    await rig.until(second, FlowStatus.RUNNING)
    assert rig.sent() == [first.id, second.id]


async def test_a_successor_holds_the_earlier_fire_the_dead_owner_committed_but_had_not_parked_yet(rig: Rig) -> None:
    # Given a live run, and the task's next fire committed by the run's node, which died before that fire's park
    # behind the run was written (its outcome is written in the background): pending as the fire wrote it
    task, (first, second, third) = await _running_on_a_node_that_dies(rig, "queue_one", 3)
    assert (await rig.stored(second)).next_attempt_at_ms == second.scheduled_at_ms
    successor = await rig.node(rig.every)

    # When the task fires on the successor while the run lives
    await rig.fire(successor, task, third)

    # Then the later fire is skipped: the earlier one keeps the task's one queued place
    assert (await rig.until(third, FlowStatus.SKIPPED, FlowStatus.RUNNING)).status is FlowStatus.SKIPPED

    # And the earlier one, re-driven by the successor's compensator, waits behind the run and goes once it ended
    successor.deliverer.deliver(task, await rig.stored(second))
    await asyncio.sleep(WATCH_S * 5)
    assert rig.sent() == [first.id]
    await rig.report(first, status="succeeded")
    await rig.until(second, FlowStatus.RUNNING)
    assert rig.sent() == [first.id, second.id]


async def test_a_successor_queues_the_earliest_of_the_fires_it_judges_together(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a live run whose node died before the task's next instants fired (a take-over fires them in one go)
    task, (first, second, third) = await _running_on_a_node_that_dies(rig, "queue_one", 3)
    successor = await rig.node(rig.every)
    read, reads = rig.open_flows_of_task, 0

    async def first_read_slower(app_id: str, task_id: int, limit: int) -> list[Flow]:
        nonlocal reads
        reads += 1
        if reads == 1:  # the store answers the earlier fire's read after the later one's (SQLite's pool, load)
            await asyncio.sleep(WATCH_S * 5)
        return await read(app_id, task_id, limit)

    monkeypatch.setattr(rig, "open_flows_of_task", first_read_slower)

    # When both instants are handed to delivery at once, in their order
    successor.deliverer.submit(CallbackJob(task, second, APP))
    successor.deliverer.submit(CallbackJob(task, third, APP))
    await asyncio.sleep(WATCH_S * 20)

    # Then the earlier one is the queued fire and the later one is skipped, whichever read answered first
    assert (await rig.stored(third)).status is FlowStatus.SKIPPED
    parked = await rig.stored(second)
    assert parked.status is FlowStatus.PENDING and parked.attempts == 0
    await rig.report(first, status="succeeded")
    await rig.until(second, FlowStatus.RUNNING)
    assert rig.sent() == [first.id, second.id]


async def test_a_shard_whose_live_runs_cannot_be_read_is_not_taken(rig: Rig) -> None:
    # Given a store that cannot answer the read of a shard's live runs
    node = await rig.node()
    rig.unreadable = True

    # Then acquiring its shards raises and leaves them not owned (nothing of theirs fires), and a retry takes them
    with pytest.raises(ConnectionError):
        await node.runner.set_owned(rig.every)
    assert node.runner.owned == frozenset()
    rig.unreadable = False
    await node.runner.set_owned(rig.every)
    assert node.runner.owned == rig.every


async def test_a_run_of_a_task_that_may_overlap_itself_is_not_watched(rig: Rig) -> None:
    task, (first, second) = await _running_on_a_node_that_dies(rig, "allow", 2)
    successor = await rig.node(rig.every)

    await rig.fire(successor, task, second)

    assert (await rig.until(second, FlowStatus.RUNNING)).status is FlowStatus.RUNNING
    assert rig.sent() == [first.id, second.id]


async def test_a_shard_taken_while_its_server_was_unreachable_learns_its_runs_when_it_answers(rig: Rig) -> None:
    task, (first, second) = await _running_on_a_node_that_dies(rig, "skip_if_running", 2)
    shard = shard_of_task_id(task.id)

    # Given a successor that takes the shard over while its database server is paused (nothing read then)
    successor = await rig.node()
    await successor.runner.set_paused(frozenset({shard}))
    await successor.runner.set_owned(rig.every)

    # When the server answers again and the task fires there
    await successor.runner.set_paused(frozenset())
    await rig.fire(successor, task, second)

    # Then the run holds the gate
    assert (await rig.until(second, FlowStatus.SKIPPED, FlowStatus.RUNNING)).status is FlowStatus.SKIPPED
    assert rig.sent() == [first.id]


async def _failed_on_a_node_that_dies(rig: Rig, overlap: str, count: int) -> tuple[Task, list[Flow]]:
    """A run of the task's first flow that its executor reported failed (to another node's API, whose retry
    of it is nowhere in memory, as when that node died too) while the node that started it then dies: the
    flow waits in the store, ``pending``, for the retry its task's policy gives it."""
    task, flows = await _running_on_a_node_that_dies(rig, overlap, count)
    await rig.report(flows[0], status="failed", message="disk full")
    waiting = await rig.stored(flows[0])
    assert waiting.status is FlowStatus.PENDING and waiting.run is not None
    return task, flows


async def test_a_successor_skips_a_fire_while_a_failed_run_awaits_its_retry_and_the_retry_goes(rig: Rig) -> None:
    task, (first, second) = await _failed_on_a_node_that_dies(rig, "skip_if_running", 2)

    # When another node takes the shard over and the task fires there
    successor = await rig.node(rig.every)
    await rig.fire(successor, task, second)

    # Then the fire is skipped, naming the flow whose failed run awaits its retry
    skipped = await rig.until(second, FlowStatus.SKIPPED, FlowStatus.RUNNING)
    assert skipped.status is FlowStatus.SKIPPED
    assert skipped.last_error == f"skipped: flow {first.id} of the task is still running"

    # And the retry, re-driven by the successor's compensator, is sent (not skipped behind a later fire)
    successor.deliverer.deliver(task, await rig.stored(first))
    retried = await rig.until(first, FlowStatus.RUNNING, FlowStatus.SKIPPED)
    assert retried.status is FlowStatus.RUNNING and retried.run is not None and retried.run.attempt == 2
    assert rig.sent() == [first.id, first.id]


async def test_a_successor_queues_a_fire_behind_a_failed_run_until_its_retry_ends(rig: Rig) -> None:
    task, (first, second, third) = await _failed_on_a_node_that_dies(rig, "queue_one", 3)
    successor = await rig.node(rig.every)

    # When the task fires twice on the successor while the failed run awaits its retry
    await rig.fire(successor, task, second)
    await rig.fire(successor, task, third)
    await asyncio.sleep(WATCH_S * 5)

    # Then one fire waits, the other is skipped, and nothing was sent
    assert rig.sent() == [first.id]
    assert (await rig.until(third, FlowStatus.SKIPPED)).last_error == (
        f"skipped: flow {first.id} of the task is still running"
    )
    assert (await rig.stored(second)).status is FlowStatus.PENDING

    # And the retry goes first; the waiting fire goes once the retry's run ended (reported to another node)
    successor.deliverer.deliver(task, await rig.stored(first))
    await rig.until(first, FlowStatus.RUNNING)
    await asyncio.sleep(WATCH_S * 5)
    assert rig.sent() == [first.id, first.id]
    await rig.runs.report(APP, first.id, {"attempt": 2, "status": "succeeded"})
    await rig.until(second, FlowStatus.RUNNING)
    assert rig.sent() == [first.id, first.id, second.id]
