"""Job runs from a broker (docs/targets.md "Runs from a broker"): a task naming one broker target with
``callback.run_on_publish`` starts a run when the broker acknowledges the publish; the consumer reads the
flow id and attempt from the message and ends the run by its report; the run's timeout bounds it.

Each case runs the deliverer (memory store) over each broker transport against a real broker and over
the in-memory twin (the backends of ``test_broker_transport_contract.py``), with the run service and the
compensator in the same process, as the API and the owner's compensator would write the run's end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.contract.broker_backends import BrokerBackend, Received
from tests.contract.test_broker_transport_contract import backend
from tests.delivery_fakes import APP, CLOCK, SETTINGS, NoJitter, stored_flow
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.errors import NotFound
from tjobs.firing.compensator import Compensator
from tjobs.model import App, Flow, FlowStatus, RunStatus, Task, parse_flow_id
from tjobs.service.runs import RunService
from tjobs.settings import CompensatorSettings, RunSettings
from tjobs.specs import CallbackSpec
from tjobs.stores.memory import MemoryTaskStore
from tjobs.targets.model import Target

__all__ = ["backend"]  # the fixture, shared with the transport contract

RUN_TIMEOUT_MS = 600_000
WAIT_S = 10.0


class Rig:
    def __init__(self, backend: BrokerBackend, target: Target) -> None:
        self.backend = backend
        self.target = target
        self.store = MemoryTaskStore()
        self.deliverer = Deliverer(
            self.store,
            backend.transport,
            AppLimiter(SETTINGS.global_max_in_flight),
            SETTINGS,
            CLOCK,
            NoJitter(),
            flush_batch=1,
            status_reader=self.store,
        )
        self.runs = RunService(self.store, RunSettings(), CLOCK, self.read_flow, flow_sink=self.deliver)

    async def fire(self, *, run_on_publish: bool = True) -> tuple[Task, Flow]:
        """A task naming the rig's target (stored so) and its first flow, handed to delivery."""
        task, flow = await stored_flow(self.store)
        spec = CallbackSpec(
            (), targets=(self.target.name,), run_on_publish=run_on_publish, run_timeout_ms=RUN_TIMEOUT_MS
        )
        task = await self.store.update_task(replace(task, callback=spec), task.version)
        self.deliver(task, flow)
        return task, flow

    def deliver(self, task: Task, flow: Flow) -> None:
        self.deliverer.submit(CallbackJob(task, flow, APP, {self.target.name: self.target}))

    async def consumed(self) -> Received:
        [message] = await self.backend.received(self.target, 1)
        return message

    async def stored(self, flow: Flow) -> Flow:
        found = await self.store.get_flow(*parse_flow_id(flow.id))
        assert found is not None
        return found

    async def until(self, flow: Flow, status: FlowStatus, attempts: int = 1) -> Flow:
        async with asyncio.timeout(WAIT_S):
            while True:
                found = await self.stored(flow)
                if found.status is status and found.attempts == attempts:
                    return found
                await asyncio.sleep(0.005)

    async def read_flow(self, app: App, id_: str) -> Flow:
        flow = await self.store.get_flow(*parse_flow_id(id_))
        if flow is None or flow.app_id != app.id:
            raise NotFound("flow", id_)
        return flow


@pytest.fixture
async def rig(backend: BrokerBackend) -> AsyncIterator[Rig]:
    made = Rig(backend, await backend.destination())
    await made.deliverer.start()
    yield made
    await made.deliverer.stop(1.0)


async def test_an_acknowledged_publish_starts_a_run_that_the_consumers_report_ends(rig: Rig) -> None:
    # Given a fire of a run_on_publish task, acknowledged by its broker
    _, flow = await rig.fire()
    running = await rig.until(flow, FlowStatus.RUNNING)

    # Then the flow runs, bounded by the task's run timeout from the acknowledgement
    run = running.run
    assert run is not None and (run.status, run.attempt) == (RunStatus.RUNNING, 1)
    assert run.deadline_ms == run.started_at_ms + RUN_TIMEOUT_MS
    assert running.next_attempt_at_ms == run.deadline_ms  # the compensator's sweep finds it then

    # When the consumer reads the message and reports its end by the flow id and attempt it carries
    message = await rig.consumed()
    assert message.headers["webhook-id"] == flow.id and message.headers["tjobs-run"] == "report"
    attempt = int(message.headers["tjobs-attempt"])
    answer = await rig.runs.report(APP, flow.id, {"status": "succeeded", "attempt": attempt, "result": {"rows": 3}})

    # Then the flow is delivered with the run's result
    assert answer.flow.status is FlowStatus.DELIVERED
    assert answer.flow.run is not None and answer.flow.run.result == {"rows": 3}


async def test_a_report_that_overtakes_the_runs_start_still_ends_it_once(rig: Rig) -> None:
    _, flow = await rig.fire()
    message = await rig.consumed()  # read at once: its report may come before the run's start is written

    report = {"status": "succeeded", "attempt": int(message.headers["tjobs-attempt"])}
    await rig.runs.report(APP, flow.id, report)
    ended = await rig.until(flow, FlowStatus.DELIVERED)

    assert ended.run is not None and ended.run.status is RunStatus.SUCCEEDED
    assert (await rig.runs.report(APP, flow.id, report)).repeated


async def test_without_run_on_publish_the_acknowledgement_delivers_the_flow(rig: Rig) -> None:
    _, flow = await rig.fire(run_on_publish=False)

    delivered = await rig.until(flow, FlowStatus.DELIVERED)

    assert delivered.run is None and "tjobs-run" not in (await rig.consumed()).headers


async def test_a_failed_report_publishes_the_next_attempt_as_a_new_run(rig: Rig) -> None:
    _, flow = await rig.fire()
    await rig.until(flow, FlowStatus.RUNNING)
    first = await rig.consumed()

    await rig.runs.report(APP, flow.id, {"status": "failed", "attempt": 1, "message": "disk full"})

    again = await rig.until(flow, FlowStatus.RUNNING, attempts=2)
    assert again.run is not None and (again.run.attempt, again.run.status) == (2, RunStatus.RUNNING)
    second = await rig.consumed()
    assert (first.headers["tjobs-attempt"], second.headers["tjobs-attempt"]) == ("1", "2")


async def test_a_run_no_consumer_reports_times_out_and_is_published_again(rig: Rig) -> None:
    # Given a run whose consumer never reports
    task, flow = await rig.fire()
    running = await rig.until(flow, FlowStatus.RUNNING)
    await rig.consumed()
    assert running.run is not None and running.run.deadline_ms is not None

    # When the owner's compensator looks past the run's deadline
    late = ManualClock(running.run.deadline_ms + 2_000)
    every = frozenset(rig.store.topology.shards())
    grace = CompensatorSettings(interval_s=1.0, grace_s=1.0, batch=100)
    compensator = Compensator(rig.store, lambda: every, rig.deliverer.is_in_flight, rig.deliver, grace, late, 16_000)
    await compensator.run_once()

    # Then the run ended timed_out and the task's budget published attempt 2, a new run
    again = await rig.until(flow, FlowStatus.RUNNING, attempts=2)
    assert again.run is not None and (again.run.attempt, again.run.status) == (2, RunStatus.RUNNING)
    assert (await rig.consumed()).headers["tjobs-attempt"] == "2"
    assert compensator.runs_ended == 1 and task.callback.run_on_publish
