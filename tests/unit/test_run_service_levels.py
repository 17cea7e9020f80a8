"""The service levels count a job run's end, not its 202 (README "Job runs", docs/operations.md "Service
levels"): a run's start is told as ``running`` (no delivered, no dead), and its end as the writer wrote it,
whichever writer that is: a report or a cancel (the run service), or the deadline (the compensator); a
repeated report counts nothing more. The first send's delivery lateness is the run's start, never its end.
On the memory store with a manual clock and the node's observer (service levels, metrics)."""

from __future__ import annotations

from dataclasses import replace

from tests.delivery_fakes import APP, CLOCK, stored_flow
from tjobs.clock import ManualClock
from tjobs.errors import NotFound
from tjobs.firing.compensator import Compensator
from tjobs.model import App, DeliveryMode, Flow, FlowRun, FlowStatus, FlowUpdate, RunStatus
from tjobs.observability.metrics import Metrics
from tjobs.observability.observer import MetricsObserver
from tjobs.observability.slo import ServiceLevels
from tjobs.service.runs import RunService
from tjobs.settings import CompensatorSettings, RunSettings
from tjobs.stores.memory import MemoryTaskStore

RUN_TIMEOUT_MS = 60_000


class Rig:
    def __init__(self) -> None:
        self.store = MemoryTaskStore()
        self.clock = ManualClock(CLOCK.now_ms())
        self.slo = ServiceLevels(self.clock.now_ms)
        self.metrics = Metrics()
        self.observer = MetricsObserver(self.metrics, self.slo, self.clock.now_ms)
        self.runs = RunService(self.store, RunSettings(), self.clock, self.read_flow, observer=self.observer)

    async def read_flow(self, app: App, id_: str) -> Flow:
        task_id, _, at = id_.partition("-")
        flow = await self.store.get_flow(int(task_id), int(at))
        if flow is None:
            raise NotFound("flow", id_)
        return flow

    async def running(self, delivery: DeliveryMode = DeliveryMode.AT_LEAST_ONCE) -> Flow:
        """A flow whose attempt 1 its target accepted, told to the observer as the deliverer tells it."""
        task, flow = await stored_flow(self.store, clock=self.clock, delivery=delivery)
        now_ms = self.clock.now_ms()
        run = FlowRun(RunStatus.RUNNING, 1, now_ms, now_ms + RUN_TIMEOUT_MS)
        started = FlowUpdate(task.id, flow.scheduled_at_ms, FlowStatus.RUNNING, 1, run.deadline_ms, 202, run=run)
        await self.store.record_flow_updates([started], now_ms)
        self.observer.flow_update(APP.id, started)
        return replace(flow, status=FlowStatus.RUNNING)

    def counted(self, status: str) -> int:
        return self.slo.outcome_counts.get((APP.id, status), 0)

    def lateness_samples(self) -> int:
        return sum(self.metrics.per_app[APP.id].delivery_lateness.counts)


async def test_a_run_counts_delivered_at_its_succeeded_report_once_not_at_its_202() -> None:
    rig = Rig()
    flow = await rig.running()
    assert (rig.counted("running"), rig.counted("delivered")) == (1, 0)  # the 202 is no delivery

    rig.clock.advance(30_000)
    report = {"status": "succeeded", "attempt": 1}
    await rig.runs.report(APP, flow.id, report)
    await rig.runs.report(APP, flow.id, report)  # repeated: nothing written, nothing counted

    assert rig.counted("delivered") == 1
    assert rig.slo.minutes.take()  # the minute's delivered is kept for the stored service levels
    assert rig.lateness_samples() == 1  # the start's lateness only, not the 30 s run as delivery lateness


async def test_a_run_that_times_out_counts_dead_when_the_compensator_ends_it() -> None:
    rig = Rig()
    await rig.running(DeliveryMode.AT_MOST_ONCE)  # a timed-out run is not retried: dead
    every = frozenset(rig.store.topology.shards())
    grace = CompensatorSettings(interval_s=1.0, grace_s=1.0, batch=100)
    compensator = Compensator(
        rig.store,
        lambda: every,
        lambda flow_id: False,
        lambda t, f: None,
        grace,
        rig.clock,
        16_000,
        observer=rig.observer,
    )

    rig.clock.advance(RUN_TIMEOUT_MS + 2_000)
    await compensator.run_once()

    assert compensator.runs_ended == 1 and rig.counted("dead") == 1 and rig.counted("delivered") == 0


async def test_a_failed_report_counts_a_retry_and_a_cancel_counts_cancelled() -> None:
    rig = Rig()
    failing, cancelled = await rig.running(), await rig.running()

    await rig.runs.report(APP, failing.id, {"status": "failed", "attempt": 1})
    await rig.runs.cancel(APP, cancelled.id)
    await rig.runs.report(APP, cancelled.id, {"status": "failed", "attempt": 1})

    assert (rig.counted("pending"), rig.counted("cancelling"), rig.counted("cancelled")) == (1, 1, 1)
    assert rig.counted("dead") == rig.counted("delivered") == 0
