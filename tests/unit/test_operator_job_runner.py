"""A redrive job runs once across nodes: two nodes over one SQLite directory, the first dies in the middle
of a batch, the second resumes from the saved position once the lease ran out, and no flow is redriven
twice (not even one that died again after the first node redrove it); a node that stops gives its job
back at once."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import pytest
import pytest_asyncio

from sharding import Topology
from tests.delivery_fakes import stored_flow
from tjobs.clock import ManualClock
from tjobs.errors import Conflict, NotFound, TjobsError
from tjobs.model import App, Flow, FlowStatus, FlowUpdate, parse_flow_id
from tjobs.service.flow_filters import FlowFilters
from tjobs.service.operator_job_runner import LEASE_MS, OperatorJobRunner
from tjobs.service.operator_jobs import OperatorJobService
from tjobs.service.search import SearchService
from tjobs.settings import StorageSettings
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.operator_jobs import OperatorJob
from tjobs.stores.migrate import migrate
from tjobs.stores.operator_job_store import operator_jobs_of
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.asyncio

START_MS = 1_800_000_000_000


class NodeDied(Exception):
    """What a node's crash looks like to the batch it was running."""


@dataclass
class JobNode:
    """One node's view: its own store over the shared files, its runner, its redrives."""

    name: str
    store: TaskStore
    runner: OperatorJobRunner
    service: OperatorJobService
    redriven: list[str]
    die_after: int | None = None  # redrives before the node dies (mid-batch)
    after_batch: Callable[[], Awaitable[object]] | None = None  # what happens meanwhile, once a batch is redriven


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> StorageSettings:
    """One migrated directory for every case (each case has an app of its own; its jobs all end)."""
    settings = StorageSettings(
        urls=[f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('jobs') / 'data'}"], topology="1x1x4"
    )
    asyncio.run(migrate(settings))
    return settings


_apps = itertools.count(1)


@pytest_asyncio.fixture
async def nodes(storage: StorageSettings) -> AsyncIterator[tuple[JobNode, JobNode, ManualClock, App]]:
    app = App(f"app_jobs{next(_apps)}", "jobs", "", ["secret"])
    clock = ManualClock(START_MS)
    made: list[JobNode] = []
    for name in ("node-a", "node-b"):
        store = SQLAlchemyTaskStore(storage)
        await store.start()
        search = SearchService(store, Topology.parse("1x1x4"))
        redriven: list[str] = []
        node = JobNode(name, store, None, None, redriven)  # type: ignore[arg-type]

        async def redrive(
            app: App, flow_ids: Sequence[str], node: JobNode = node
        ) -> list[tuple[str, Flow | None, TjobsError | None]]:
            results: list[tuple[str, Flow | None, TjobsError | None]] = []
            for flow_id in flow_ids:
                if node.die_after is not None and len(node.redriven) >= node.die_after:
                    raise NodeDied(node.name)
                task_id, at = parse_flow_id(flow_id)
                flow = await node.store.redrive_flow(task_id, at, clock.now_ms())
                if flow is None:
                    results.append((flow_id, None, Conflict(f"flow {flow_id} is no longer dead")))
                else:
                    node.redriven.append(flow_id)
                    results.append((flow_id, flow, None))
            if node.after_batch is not None:
                await node.after_batch()
            return results

        async def app_of(app_id: str) -> App:
            if app_id != app.id:
                raise NotFound("app", app_id)
            return app

        jobs = operator_jobs_of(store)
        node.runner = OperatorJobRunner(jobs, search, redrive, app_of, clock, name, batch=100)
        node.service = OperatorJobService(jobs, search, clock)
        made.append(node)
    yield made[0], made[1], clock, app
    for node in made:
        await node.store.close()


async def dead_letters(store: TaskStore, app: App, count: int, clock: ManualClock) -> list[Flow]:
    flows = []
    for index in range(count):
        _, flow = await stored_flow(store, app=app, status=FlowStatus.DEAD, overdue_ms=index * 1000, clock=clock)
        flows.append(flow)
    return flows


async def test_a_redrive_job_resumes_on_another_node_and_redrives_each_flow_once(
    nodes: tuple[JobNode, JobNode, ManualClock, App],
) -> None:
    a, b, clock, app = nodes
    flows = await dead_letters(a.store, app, 250, clock)
    clock.advance(1000)

    # Given an operator confirmed the 250 dead letters the server counted
    count = await a.service.count_dead_letters(app, FlowFilters(), clock.now_ms())
    assert (count.matched, count.more) == (250, False)
    job, created = await a.service.start_redrive(
        app, FlowFilters(), confirm_count=250, dead_before_ms=clock.now_ms(), created_by="alice"
    )
    assert created and job.state == "queued"

    # When node A dies in its second batch, after redriving 150 flows (its first batch of 100 saved)
    a.die_after = 150
    with pytest.raises(NodeDied):
        await a.runner.run_once()
    stored = await b.service.get(app.id, job.id)
    assert (stored.state, stored.owner, stored.processed) == ("running", "node-a", 100)
    # and 10 of the flows it redrove die again meanwhile
    died_again = a.redriven[100:110]
    clock.advance(5)
    keys = [parse_flow_id(flow_id) for flow_id in died_again]
    updates = [FlowUpdate(task_id, at, FlowStatus.DEAD, 2, None, 503) for task_id, at in keys]
    await b.store.record_flow_updates(updates, clock.now_ms())

    # Then node B finds nothing to claim while A's lease holds
    assert not await b.runner.run_once()
    # and once it ran out, B resumes from A's saved position and the job ends
    clock.advance(LEASE_MS)
    assert await b.runner.run_once()
    done = await b.service.get(app.id, job.id)
    assert (done.state, done.owner, done.processed, done.failed) == ("done", "node-b", 200, 0)

    # Every flow was redriven exactly once, over both nodes; none of those that died again twice
    times = Counter(a.redriven + b.redriven)
    assert set(times) == {flow.id for flow in flows} and set(times.values()) == {1}
    assert set(died_again).isdisjoint(b.redriven)
    assert not await a.runner.run_once()  # nothing is left to claim


async def queued_job(a: JobNode, app: App, clock: ManualClock, count: int) -> OperatorJob:
    """``count`` dead letters and a job of them, node A walking it 10 a batch."""
    await dead_letters(a.store, app, count, clock)
    clock.advance(1000)
    job, _ = await a.service.start_redrive(
        app, FlowFilters(), confirm_count=count, dead_before_ms=clock.now_ms(), created_by="alice"
    )
    a.runner._batch = 10
    return job


async def test_a_node_that_stops_gives_its_job_back_at_once(nodes: tuple[JobNode, JobNode, ManualClock, App]) -> None:
    a, b, clock, app = nodes
    job = await queued_job(a, app, clock, 30)

    async def stopping() -> None:
        a.runner._stopping.set()  # the node is asked to stop while its first batch runs

    a.after_batch = stopping
    assert await a.runner.run_once()
    given_back = await b.service.get(app.id, job.id)
    assert (given_back.processed, given_back.lease_until_ms, given_back.state) == (10, 0, "running")

    # the other node takes it at once, without waiting for a lease to run out
    assert await b.runner.run_once()
    finished: OperatorJob = await b.service.get(app.id, job.id)
    assert (finished.state, finished.processed, len(a.redriven) + len(b.redriven)) == ("done", 30, 30)


async def test_a_cancelled_job_stops_at_its_next_batch(nodes: tuple[JobNode, JobNode, ManualClock, App]) -> None:
    a, b, clock, app = nodes
    job = await queued_job(a, app, clock, 30)
    a.after_batch = lambda: b.service.cancel(app.id, job.id)  # cancelled while its first batch runs
    assert await a.runner.run_once()
    cancelled = await b.service.get(app.id, job.id)
    assert (cancelled.state, cancelled.processed, cancelled.cancel_requested) == ("cancelled", 10, True)
    assert len(a.redriven) == 10
