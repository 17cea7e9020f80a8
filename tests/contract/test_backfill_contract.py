"""Backfill (issue 30 item 5): a task's schedule over a past range becomes manual flows, one per instant of
exactly that range, an instant that has a flow left as it is, paced by the runner's waits, cancellable,
resumed from its position by another node without a second flow, and one flow at a time for a task that
must not overlap itself (its request's fields: tests/unit/test_backfill_request.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from tests.contract.backends import NOW_MS, make_task
from tjobs.clock import ManualClock
from tjobs.errors import InvalidInput, NotFound, StorageUnavailable
from tjobs.hot_tier.local import LocalHotTier
from tjobs.model import App, Flow, FlowKind, FlowStatus, FlowUpdate, Task
from tjobs.service.backfill import MAX_BACKFILL, BackfillRequest, BackfillService
from tjobs.service.backfill_walk import WAIT_S, BackfillWalks
from tjobs.service.operator_job_runner import LEASE_MS, OperatorJobRunner
from tjobs.service.operator_jobs import OperatorJobService
from tjobs.service.tasks import TaskService
from tjobs.settings import Settings
from tjobs.specs import CallbackSpec
from tjobs.specs.pool import Overlap, PoolRoute
from tjobs.specs.schedule import IntervalSpec
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.operator_jobs import OperatorJob
from tjobs.stores.operator_job_store import operator_jobs_of

pytestmark = pytest.mark.asyncio

MINUTE_MS = 60_000
APP = App("app-a", "a", "", ["secret"])
START_MS = NOW_MS - 30 * MINUTE_MS  # the task's interval starts here, a minute apart


class NodeDied(Exception):
    """What a node's crash looks like to the step it was running."""


@dataclass
class Node:
    """One node's view of the shared store: its task service, its runner and what it handed to delivery."""

    name: str
    tasks: TaskService
    runner: OperatorJobRunner
    sent: list[Flow] = field(default_factory=list)
    slept: list[float] = field(default_factory=list)
    die_after: int | None = None  # flows handed to delivery before this node dies (mid-step)
    on_sleep: Callable[[], Awaitable[object]] | None = None


@dataclass
class Cluster:
    store: TaskStore
    clock: ManualClock
    a: Node
    b: Node
    backfills: BackfillService
    jobs: OperatorJobService

    async def task(self, **callback: Any) -> Task:
        task = make_task(app_id=APP.id, now_ms=START_MS)
        task.schedule = IntervalSpec(MINUTE_MS, start_at_ms=START_MS)
        if callback:
            task.callback = CallbackSpec((), **callback)
        return await self.store.insert_task(task)

    async def flows(self, task: Task) -> list[Flow]:
        return sorted(await self.store.list_flows(task.id, 1000), key=lambda flow: flow.scheduled_at_ms)

    async def job(self, job_id: str) -> OperatorJob:
        return await self.jobs.get(APP.id, job_id)


def node(name: str, store: TaskStore, clock: ManualClock) -> Node:
    made = Node(name, None, None)  # type: ignore[arg-type]

    def deliver(task: Task, flow: Flow) -> None:
        if made.die_after is not None and len(made.sent) >= made.die_after:
            raise NodeDied(name)
        made.sent.append(flow)

    async def sleep(seconds: float) -> None:
        made.slept.append(seconds)
        if made.on_sleep is not None:
            await made.on_sleep()

    async def app_of(app_id: str) -> App:
        if app_id != APP.id:
            raise NotFound("app", app_id)
        return APP

    settings = Settings(storage={"urls": ["memory://"]})
    made.tasks = TaskService(store, LocalHotTier(), settings, clock, store.topology, flow_sink=deliver)
    walks = BackfillWalks(made.tasks, app_of, clock)
    jobs = operator_jobs_of(store)
    made.runner = OperatorJobRunner(
        jobs, made.tasks.search, made.tasks.redrive, app_of, clock, name, kinds={"backfill": walks.open}, sleep=sleep
    )
    return made


@pytest.fixture
async def cluster(store: TaskStore) -> Cluster:
    clock = ManualClock(NOW_MS)
    a = node("node-a", store, clock)
    b = node("node-b", store, clock)
    b.runner._jobs = a.runner._jobs  # the memory twin's jobs are one dict (the SQL store's: one table)
    jobs = a.runner._jobs
    return Cluster(
        store, clock, a, b, BackfillService(jobs, a.tasks, clock), OperatorJobService(jobs, a.tasks.search, clock)
    )


def at(minute: int) -> int:
    """The task's instant ``minute`` minutes after its start."""
    return START_MS + minute * MINUTE_MS


async def test_the_instants_of_exactly_the_range_become_manual_flows_once_each(cluster: Cluster) -> None:
    task = await cluster.task()
    # Given the instant of minute 5 fired already
    fired = Flow(task.id, at(5), APP.id, FlowKind.SCHEDULED, FlowStatus.DELIVERED, 1, None, at(5), at(5))
    await cluster.store.insert_manual_flow(task.id, fired)

    # When [minute 3, minute 10) is backfilled at 4 a second
    job = await cluster.backfills.start(APP, task.id, BackfillRequest(at(3), at(10), 4), created_by="alice")
    assert (job.kind, job.state, job.total, job.params["task_id"]) == ("backfill", "queued", 7, str(task.id))
    assert await cluster.a.runner.run_once()

    # Then minutes 3..9 each have one flow: the fired one kept, the six others manual ones, sent once each
    flows = await cluster.flows(task)
    assert [flow.scheduled_at_ms for flow in flows] == [at(minute) for minute in range(3, 10)]
    assert flows[2] == fired
    assert {flow.kind for flow in flows if flow.scheduled_at_ms != at(5)} == {FlowKind.MANUAL}
    assert [flow.scheduled_at_ms for flow in cluster.a.sent] == [at(m) for m in (3, 4, 6, 7, 8, 9)]
    done = await cluster.job(job.id)
    assert (done.state, done.processed, done.failed, done.position) == ("done", 7, 0, at(9))
    # paced: 4 instants, a second's wait, 3 more (the last step ends the job: no wait after it)
    assert cluster.a.slept == [1.0]


async def test_a_backfill_is_paced_by_the_runners_waits(cluster: Cluster) -> None:
    task = await cluster.task()
    job = await cluster.backfills.start(APP, task.id, BackfillRequest(at(0), at(25), 10), created_by="alice")
    assert await cluster.a.runner.run_once()
    assert cluster.a.slept == [1.0, 1.0]  # 10, wait, 10, wait, 5
    assert (await cluster.job(job.id)).processed == 25 and len(cluster.a.sent) == 25


async def test_a_cancelled_backfill_stops_at_its_next_step(cluster: Cluster) -> None:
    task = await cluster.task()
    job = await cluster.backfills.start(APP, task.id, BackfillRequest(at(0), at(25), 5), created_by="alice")

    async def cancel() -> None:
        await cluster.jobs.cancel(APP.id, job.id)

    cluster.a.on_sleep = cancel  # the operator cancels while the job waits out its first second
    assert await cluster.a.runner.run_once()
    cancelled = await cluster.job(job.id)
    assert (cancelled.state, cancelled.processed, cancelled.position) == ("cancelled", 10, at(9))
    assert len(await cluster.flows(task)) == 10


async def test_a_node_that_died_mid_step_is_resumed_from_the_position_without_a_second_flow(
    cluster: Cluster,
) -> None:
    task = await cluster.task()
    job = await cluster.backfills.start(APP, task.id, BackfillRequest(at(0), at(25), 10), created_by="alice")

    # Node A dies in its second step, after 3 of its flows (its first step of 10 saved)
    cluster.a.die_after = 13
    with pytest.raises(NodeDied):
        await cluster.a.runner.run_once()
    held = await cluster.job(job.id)
    assert (held.owner, held.processed, held.position) == ("node-a", 10, at(9))
    assert not await cluster.b.runner.run_once()  # A's lease holds

    # Once it ran out, B walks A's unsaved step again: the flows A made are left as they are
    cluster.clock.advance(LEASE_MS + 1)
    assert await cluster.b.runner.run_once()
    done = await cluster.job(job.id)
    assert (done.state, done.owner, done.processed, done.claims) == ("done", "node-b", 25, 2)
    flows = await cluster.flows(task)
    assert [flow.scheduled_at_ms for flow in flows] == [at(minute) for minute in range(25)]
    sent = [flow.scheduled_at_ms for flow in cluster.a.sent + cluster.b.sent]
    assert len(sent) == len(set(sent)) == 24  # none twice; the flow A made as it died never reached delivery

    # and A, restarted with its old claim, writes nothing (the claims fence)
    assert await cluster.a.runner._jobs.save_operator_job(replace(held, processed=99)) is None


async def test_an_unreachable_database_stops_the_step_and_loses_no_instant(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = await cluster.task()
    job = await cluster.backfills.start(APP, task.id, BackfillRequest(at(0), at(15), 10), created_by="alice")
    made = cluster.a.tasks.backfill_flow

    async def down_at_minute_13(app: App, backfilled: Task, instant: int) -> Flow | None:
        if instant == at(13):
            raise StorageUnavailable("the shard's server does not answer")
        return await made(app, backfilled, instant)

    monkeypatch.setattr(cluster.a.tasks, "backfill_flow", down_at_minute_13)
    with pytest.raises(StorageUnavailable):
        await cluster.a.runner.run_once()
    held = await cluster.job(job.id)
    assert (held.processed, held.failed, held.position) == (10, 0, at(9))  # minutes 10-12 made, not saved

    cluster.clock.advance(LEASE_MS + 1)
    assert await cluster.b.runner.run_once()
    done = await cluster.job(job.id)
    assert (done.state, done.processed, done.failed) == ("done", 15, 0)
    assert [flow.scheduled_at_ms for flow in await cluster.flows(task)] == [at(minute) for minute in range(15)]


async def test_a_task_that_must_not_overlap_is_backfilled_one_flow_at_a_time(cluster: Cluster) -> None:
    task = await cluster.task(pool=PoolRoute("workers", overlap=Overlap.SKIP_IF_RUNNING))
    job = await cluster.backfills.start(APP, task.id, BackfillRequest(at(0), at(3), 100), created_by="alice")
    looks = 0

    async def finish_at_the_second_look() -> None:
        nonlocal looks
        running = [flow for flow in await cluster.flows(task) if not flow.status.terminal]
        assert len(running) == 1  # never two of its flows at once
        looks += 1
        if looks % 2 == 0:
            update = FlowUpdate(task.id, running[0].scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 200)
            await cluster.store.record_flow_updates([update], cluster.clock.now_ms())

    cluster.a.on_sleep = finish_at_the_second_look
    assert await cluster.a.runner.run_once()
    assert (await cluster.job(job.id)).processed == 3
    # each flow: made, its pace waited out (0.01 s at 100/s), found still running once, then the next
    assert cluster.a.slept == [0.01, WAIT_S, 0.01, WAIT_S]


async def test_a_task_deleted_meanwhile_fails_the_job(cluster: Cluster) -> None:
    task = await cluster.task()
    job = await cluster.backfills.start(APP, task.id, BackfillRequest(at(0), at(25), 10), created_by="alice")

    async def delete() -> None:
        await cluster.a.tasks.delete(APP, task.id)

    cluster.a.on_sleep = delete
    assert await cluster.a.runner.run_once()
    failed = await cluster.job(job.id)
    assert (failed.state, failed.processed, failed.last_error) == ("failed", 10, f"task {task.id} no longer exists")


async def test_a_range_over_the_bound_or_without_instants_is_refused_naming_from(cluster: Cluster) -> None:
    task = await cluster.task()
    with pytest.raises(InvalidInput) as none:
        await cluster.backfills.start(APP, task.id, BackfillRequest(START_MS - 10, START_MS), created_by="a")
    assert none.value.field == "from" and none.value.code == "no_instants"
    dense = make_task(app_id=APP.id, now_ms=0)
    dense.schedule = IntervalSpec(1000, start_at_ms=0)
    dense = await cluster.store.insert_task(dense)
    request = BackfillRequest(0, (MAX_BACKFILL + 1) * 1000)
    with pytest.raises(InvalidInput) as many:
        await cluster.backfills.start(APP, dense.id, request, created_by="a")
    assert many.value.field == "from" and many.value.code == "too_many_instants"
    exactly = await cluster.backfills.start(APP, dense.id, BackfillRequest(0, MAX_BACKFILL * 1000), created_by="a")
    assert exactly.total == MAX_BACKFILL
    with pytest.raises(NotFound):
        await cluster.backfills.start(App("app-b", "b", "", []), task.id, BackfillRequest(0, 1000), created_by="b")
