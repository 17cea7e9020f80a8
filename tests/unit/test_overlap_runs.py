"""Overlap policies judge runs, not deliveries (README "Job runs", docs/pools.md "Overlap"): a pool flow
whose executor accepted it as a run blocks its task's next fires (``skip_if_running`` skips them,
``queue_one`` holds one) until the run ends: its final report, its timeout, or its cancel, whichever
node wrote that end (the firing node reads its live runs' status every ``run_watch_s``).

On the memory store with the deliverer, the embedded executor registry, the transport twin, the run
service and the compensator in one process; the store's clock is a ManualClock."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.delivery_fakes import APP, CLOCK, SETTINGS, NoJitter, settle, stored_flow
from tjobs.clock import ManualClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.foreign_flows import ForeignFlows
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.pool_dispatcher import PoolDispatcher
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.errors import NotFound
from tjobs.firing.compensator import Compensator
from tjobs.model import App, DeliveryMode, Flow, FlowStatus, RunStatus, Task, parse_flow_id
from tjobs.pools.model import Executor
from tjobs.service.runs import RunService
from tjobs.settings import CompensatorSettings, RunSettings
from tjobs.specs import CallbackSpec
from tjobs.specs.pool import parse_pool_route
from tjobs.stores.memory import MemoryTaskStore

RUN = Answer(202, headers={"tjobs-run": "accepted"})
RUN_TIMEOUT_MS = 60_000
WATCH_S = 0.01


class Rig:
    def __init__(self, foreign: ForeignFlows | None = None) -> None:
        """``foreign``: the node's owned shards and window bound (:mod:`tjobs.delivery.foreign_flows`); without it
        every flow is its own."""
        self.store = MemoryTaskStore()
        self.clock = ManualClock(CLOCK.now_ms())
        self.registry = LocalCoordinator(4)
        self.transport = RecordingTransport(SETTINGS, self.clock)
        self.transport.script(then=RUN)
        self.deliverer = Deliverer(
            self.store,
            self.transport,
            AppLimiter(SETTINGS.global_max_in_flight),
            SETTINGS,
            self.clock,
            NoJitter(),
            flush_batch=1,
            status_reader=self.store,
            pools=PoolDispatcher(self.registry, self.transport),
            run_timeout_ms=RUN_TIMEOUT_MS,
            run_watch_s=WATCH_S,
            foreign=foreign,
        )
        # Reports and timeouts are written beside the deliverer, as another node's API would write them:
        # the firing node learns of them from the store only.
        self.runs = RunService(self.store, RunSettings(cancel_grace_s=10), self.clock, self.read_flow)
        every = frozenset(self.store.topology.shards())
        grace = CompensatorSettings(interval_s=1.0, grace_s=1.0, batch=100)
        self.compensator = Compensator(
            self.store, lambda: every, self.deliverer.is_in_flight, self.redrive, grace, self.clock, 16_000
        )

    def redrive(self, task: Task, flow: Flow) -> None:
        self.deliverer.submit(CallbackJob(task, flow, APP))

    async def read_flow(self, app: App, id_: str) -> Flow:
        flow = await self.store.get_flow(*parse_flow_id(id_))
        if flow is None or flow.app_id != app.id:
            raise NotFound("flow", id_)
        return flow

    async def fires(self, overlap: str, count: int, **task_fields: Any) -> tuple[Task, list[Flow]]:
        """A task routed to pool ``workers`` with this overlap policy (stored so), and ``count`` of its flows."""
        await self.registry.register_executor(APP.id, "workers", Executor("e0", "http://10.0.0.1:8000", "z1"))
        task, first = await stored_flow(self.store, clock=self.clock)
        spec = CallbackSpec((), pool=parse_pool_route({"name": "workers", "overlap": overlap}))
        task = await self.store.update_task(dataclasses.replace(task, callback=spec, **task_fields), task.version)
        flows = [first]
        for later in range(1, count):
            at_ms = first.scheduled_at_ms + later
            later_flow = dataclasses.replace(first, scheduled_at_ms=at_ms, next_attempt_at_ms=at_ms)
            flows.append(await self.store.insert_manual_flow(task.id, later_flow))
        return task, flows

    async def fire(self, task: Task, flow: Flow) -> None:
        self.deliverer.submit(CallbackJob(task, flow, APP))
        await settle()

    async def stored(self, flow: Flow) -> Flow:
        found = await self.store.get_flow(*parse_flow_id(flow.id))
        assert found is not None
        return found

    async def until(self, flow: Flow, *statuses: FlowStatus) -> Flow:
        """Wait (wall time, at most 5 s) until the stored flow is in one of ``statuses``."""
        for _ in range(int(5 / WATCH_S)):
            stored = await self.stored(flow)
            if stored.status in statuses:
                return stored
            await asyncio.sleep(WATCH_S)
        raise AssertionError(f"flow {flow.id} is {stored.status.value}, not one of {statuses}")

    def sent(self) -> list[str]:
        return [request.headers["webhook-id"] for request in self.transport.requests]


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    made = Rig()
    await made.deliverer.start()
    yield made
    await made.deliverer.stop(1.0)


async def test_skip_if_running_skips_a_fire_while_the_previous_flows_run_lives(rig: Rig) -> None:
    # Given a flow whose executor accepted it as a run
    task, (first, second) = await rig.fires("skip_if_running", 2)
    await rig.fire(task, first)
    await rig.until(first, FlowStatus.RUNNING)

    # When the task fires again while the run lives
    await rig.fire(task, second)

    # Then the new fire is skipped, naming the running flow, and nothing more is sent
    skipped = await rig.until(second, FlowStatus.SKIPPED, FlowStatus.RUNNING)
    assert skipped.status is FlowStatus.SKIPPED and skipped.attempts == 0
    assert skipped.last_error == f"skipped: flow {first.id} of the task is still running"
    assert rig.sent() == [first.id]


async def test_skip_if_running_lets_the_next_fire_go_once_the_run_ended(rig: Rig) -> None:
    task, (first, second) = await rig.fires("skip_if_running", 2)
    await rig.fire(task, first)
    await rig.until(first, FlowStatus.RUNNING)
    await rig.runs.report(APP, first.id, {"status": "succeeded", "attempt": 1})
    await asyncio.sleep(WATCH_S * 5)  # the firing node reads the run's end

    await rig.fire(task, second)

    assert (await rig.until(second, FlowStatus.RUNNING, FlowStatus.SKIPPED)).status is FlowStatus.RUNNING
    assert rig.sent() == [first.id, second.id]


async def _report_succeeded(rig: Rig, flow: Flow) -> RunStatus:
    await rig.runs.report(APP, flow.id, {"status": "succeeded", "attempt": 1})
    return RunStatus.SUCCEEDED


async def _time_out(rig: Rig, flow: Flow) -> RunStatus:
    rig.clock.advance(RUN_TIMEOUT_MS + 2_000)  # past the run's deadline and the compensator's grace
    await rig.compensator.run_once()  # ends the run (the waiting fire it leases too, and leaves: in flight here)
    assert rig.compensator.runs_ended == 1
    return RunStatus.TIMED_OUT


async def _cancel(rig: Rig, flow: Flow) -> RunStatus:
    await rig.runs.cancel(APP, flow.id)
    await asyncio.sleep(WATCH_S * 5)  # cancelling is still a live run: the queued fire keeps waiting
    assert rig.sent() == [flow.id]
    await rig.runs.report(APP, flow.id, {"status": "failed", "attempt": 1, "message": "stopped"})
    return RunStatus.CANCELLED


ENDS: dict[str, Callable[[Rig, Flow], Awaitable[RunStatus]]] = {
    "report_succeeded": _report_succeeded,
    "timed_out": _time_out,
    "cancelled": _cancel,
}


@pytest.mark.parametrize("end", ENDS)
async def test_queue_one_holds_the_next_fire_until_the_run_ends_then_sends_it(rig: Rig, end: str) -> None:
    # Given a run of an at-most-once task (a timed-out run ends dead, not retried) and two more fires
    task, (first, second, third) = await rig.fires("queue_one", 3, delivery=DeliveryMode.AT_MOST_ONCE)
    await rig.fire(task, first)
    await rig.until(first, FlowStatus.RUNNING)
    await rig.fire(task, second)
    await rig.fire(task, third)

    # Then the second waits for the run and the third is skipped
    await asyncio.sleep(WATCH_S * 5)
    assert rig.sent() == [first.id]
    assert (await rig.stored(second)).status is FlowStatus.PENDING
    skipped = await rig.until(third, FlowStatus.SKIPPED)
    assert skipped.last_error == f"skipped: flow {first.id} of the task is still running"

    # When the run ends
    ended = await ENDS[end](rig, first)

    # Then the queued fire is sent, and runs
    assert (await rig.until(second, FlowStatus.RUNNING)).run is not None
    assert rig.sent() == [first.id, second.id]
    run = (await rig.stored(first)).run
    assert run is not None and run.status is ended


async def test_a_retried_run_keeps_the_queued_fire_waiting_until_its_final_end(rig: Rig) -> None:
    # Given an at-least-once task whose run fails once and is retried (by the policy: a new attempt)
    task, (first, second) = await rig.fires("queue_one", 2)
    await rig.fire(task, first)
    await rig.until(first, FlowStatus.RUNNING)
    await rig.fire(task, second)

    await rig.runs.report(APP, first.id, {"status": "failed", "attempt": 1, "message": "flaky"})
    rig.redrive(task, await rig.stored(first))  # the retry, as the reporting node's delivery sends it

    # Then attempt 2 runs and the queued fire still waits
    retried = await rig.until(first, FlowStatus.RUNNING)
    assert retried.run is not None and retried.run.attempt == 2
    await asyncio.sleep(WATCH_S * 5)
    assert rig.sent() == [first.id, first.id]

    # When attempt 2 succeeds, the queued fire goes
    await rig.runs.report(APP, first.id, {"status": "succeeded", "attempt": 2})
    await rig.until(second, FlowStatus.RUNNING)
    assert rig.sent() == [first.id, first.id, second.id]


async def test_a_fire_queued_behind_a_run_is_parked_until_the_runs_deadline_not_leased_meanwhile(rig: Rig) -> None:
    # Given a fire queued behind a live run
    task, (first, second) = await rig.fires("queue_one", 2)
    await rig.fire(task, first)
    running = await rig.until(first, FlowStatus.RUNNING)
    await rig.fire(task, second)
    assert running.run is not None and running.run.deadline_ms is not None

    # Then it is stored pending until the run's deadline: should this node stop, the shard's next owner
    # sends it once the run is over (or timed out), and its compensator does not lease it meanwhile
    parked = await rig.stored(second)
    for _ in range(100):
        if parked.next_attempt_at_ms == running.run.deadline_ms:
            break
        await asyncio.sleep(WATCH_S)
        parked = await rig.stored(second)
    assert (parked.status, parked.attempts, parked.next_attempt_at_ms) == (
        FlowStatus.PENDING,
        0,
        running.run.deadline_ms,
    )
    rig.clock.advance(RUN_TIMEOUT_MS // 2)  # long past the compensator's grace, before the run's deadline
    await rig.compensator.run_once()
    still = await rig.stored(second)  # not leased: a lease moves its next attempt (and counts one, but this
    assert (still.attempts, still.next_attempt_at_ms) == (0, running.run.deadline_ms)  # node holds it: 0f0e324)

    # When the run ends, the queued fire goes as its first attempt
    await rig.runs.report(APP, first.id, {"status": "succeeded", "attempt": 1})
    sent = await rig.until(second, FlowStatus.RUNNING)
    assert sent.attempts == 1 and sent.run is not None and sent.run.attempt == 1


async def test_a_non_owners_fire_parked_behind_a_run_past_grace_goes_from_there_when_the_run_ends() -> None:
    # Given a node owning no shard (its API took both manual triggers of a queue_one pool task), the second fire
    # parked in the store behind the first's live run, until the run's deadline
    rig = Rig(ForeignFlows(lambda: frozenset(), grace_s=1.0, clock_skew_max_ms=100))
    await rig.deliverer.start()
    try:
        task, (first, second) = await rig.fires("queue_one", 2)
        await rig.fire(task, first)
        running = await rig.until(first, FlowStatus.RUNNING)
        await rig.fire(task, second)
        assert running.run is not None and running.run.deadline_ms is not None
        for _ in range(100):
            if (await rig.stored(second)).next_attempt_at_ms == running.run.deadline_ms:
                break
            await asyncio.sleep(WATCH_S)
        assert (await rig.stored(second)).next_attempt_at_ms == running.run.deadline_ms  # parked

        # When the run ends long past the grace after the fire's commit, well before the run's deadline
        rig.clock.advance(RUN_TIMEOUT_MS // 2)
        await rig.runs.report(APP, first.id, {"status": "succeeded", "attempt": 1})

        # Then the fire goes from this node: the owner could not lease it before the deadline it was parked at
        sent = await rig.until(second, FlowStatus.RUNNING)
        assert sent.attempts == 1 and rig.sent() == [first.id, second.id]
    finally:
        await rig.deliverer.stop(1.0)
