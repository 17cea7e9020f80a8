"""A job run's life after the target accepted it (README "Job runs"): its executor's reports, log lines
and a cancel (tjobs.service.runs), and the compensator ending a run past its deadline, on the memory
store with a manual clock. The same transitions on SQLite and MariaDB: tests/contract/test_store_runs_contract.py
and tests/api/test_job_runs_api.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.delivery_fakes import APP, CLOCK, stored_flow
from tjobs.clock import ManualClock
from tjobs.errors import FieldTooLarge, InvalidInput, NotFound, RunConflict
from tjobs.firing.compensator import Compensator
from tjobs.model import App, DeliveryMode, Flow, FlowRun, FlowStatus, FlowUpdate, RunStatus, Task
from tjobs.service.runs import DecideRun, RunService
from tjobs.settings import CompensatorSettings, RunSettings
from tjobs.stores.memory import MemoryTaskStore

RUN_TIMEOUT_MS = 60_000
SETTINGS = RunSettings(max_log_lines=5, max_log_line_bytes=64, max_result_bytes=256, cancel_grace_s=10)
GRACE = CompensatorSettings(interval_s=1.0, grace_s=30.0, batch=100)


class Harness:
    def __init__(self) -> None:
        self.store = MemoryTaskStore()
        self.clock = ManualClock(CLOCK.now_ms())
        self.redriven: list[tuple[Task, Flow]] = []
        self.runs = RunService(
            self.store,
            SETTINGS,
            self.clock,
            self.read_flow,
            flow_sink=lambda t, f: self.redriven.append((t, f)),
            decide_run=self.decide_run,
        )

    async def read_flow(self, app: App, id_: str) -> Flow:
        task_id, _, at = id_.partition("-")
        flow = await self.store.get_flow(int(task_id), int(at))
        if flow is None or flow.app_id != app.id:
            raise NotFound("flow", id_)
        return flow

    async def decide_run(self, id_: str, decide: DecideRun) -> bool:
        task_id, _, at = id_.partition("-")
        return await self.store.decide_run(int(task_id), int(at), decide)

    async def running(self, **kwargs: Any) -> tuple[Task, Flow]:
        """A flow whose attempt 1 its target accepted as a run (the deliverer's outcome)."""
        task, flow = await stored_flow(self.store, clock=self.clock, **kwargs)
        now_ms = self.clock.now_ms()
        run = FlowRun(RunStatus.RUNNING, 1, now_ms, now_ms + RUN_TIMEOUT_MS)
        started = FlowUpdate(task.id, flow.scheduled_at_ms, FlowStatus.RUNNING, 1, run.deadline_ms, 202, run=run)
        await self.store.record_flow_updates([started], now_ms)
        return task, await self.flow(flow)

    async def flow(self, flow: Flow) -> Flow:
        stored = await self.store.get_flow(flow.task_id, flow.scheduled_at_ms)
        assert stored is not None
        return stored

    def compensator(self) -> Compensator:
        every = frozenset(self.store.topology.shards())
        redrive = lambda t, f: self.redriven.append((t, f))  # noqa: E731
        return Compensator(self.store, lambda: every, lambda flow_id: False, redrive, GRACE, self.clock, 16_000)


@pytest.fixture
def h() -> Harness:
    return Harness()


async def test_progress_reports_update_the_run_and_keep_it_running(h: Harness) -> None:
    _, flow = await h.running()
    h.clock.advance(1_000)

    answer = await h.runs.report(APP, flow.id, {"status": "running", "progress": 40, "attempt": 1})
    h.clock.advance(1_000)
    answer = await h.runs.report(APP, flow.id, {"status": "running", "progress": "copying table 3 of 7"})

    stored = answer.flow
    assert stored.status is FlowStatus.RUNNING and not answer.cancel_requested and not answer.repeated
    assert stored.run is not None and stored.run.progress == "copying table 3 of 7"
    assert stored.run.reported_at_ms == h.clock.now_ms() and stored.next_attempt_at_ms == stored.run.deadline_ms


async def test_a_succeeded_report_ends_the_flow_delivered_with_its_result_once(h: Harness) -> None:
    _, flow = await h.running()
    h.clock.advance(2_000)
    report = {"status": "succeeded", "attempt": 1, "result": {"rows": 42}, "progress": 100}

    answer = await h.runs.report(APP, flow.id, report)
    h.clock.advance(1_000)
    again = await h.runs.report(APP, flow.id, report)  # the executor's retry of a report whose answer it lost

    assert answer.flow.status is FlowStatus.DELIVERED and answer.flow.next_attempt_at_ms is None
    assert flow.run is not None and answer.flow.run == replace(
        flow.run,
        status=RunStatus.SUCCEEDED,
        reported_at_ms=h.clock.now_ms() - 1_000,
        ended_at_ms=h.clock.now_ms() - 1_000,
        progress=100,
        result={"rows": 42},
    )
    assert again.repeated and again.flow == answer.flow
    with pytest.raises(RunConflict) as refused:
        await h.runs.report(APP, flow.id, {"status": "failed", "attempt": 1})
    assert refused.value.code == "run_finished" and "ended succeeded" in refused.value.message
    with pytest.raises(RunConflict):
        await h.runs.report(APP, flow.id, {"status": "running", "progress": 5})


async def test_a_failed_report_retries_the_flow_by_its_policy(h: Harness) -> None:
    task, flow = await h.running()

    answer = await h.runs.report(APP, flow.id, {"status": "failed", "message": "disk full"})

    stored = answer.flow
    assert (stored.status, stored.attempts, stored.next_attempt_at_ms) == (FlowStatus.PENDING, 1, h.clock.now_ms())
    assert stored.run is not None and stored.run.status is RunStatus.FAILED and stored.run.message == "disk full"
    assert stored.last_error == "run failed (attempt 1): disk full"
    [(redriven_task, retry)] = h.redriven  # delivery sends attempt 2, or gives up by the task's budget
    assert redriven_task.id == task.id and (retry.status, retry.attempts) == (FlowStatus.PENDING, 1)


async def test_a_failed_run_of_an_at_most_once_task_is_dead_and_never_sent_again(h: Harness) -> None:
    _, flow = await h.running(delivery=DeliveryMode.AT_MOST_ONCE)

    answer = await h.runs.report(APP, flow.id, {"status": "failed"})

    assert answer.flow.status is FlowStatus.DEAD and h.redriven == []


async def test_a_report_that_beats_the_runs_start_starts_the_run(h: Harness) -> None:
    # the executor answered 202 and reported before the deliverer wrote the run's start
    _, flow = await stored_flow(h.store, clock=h.clock)

    answer = await h.runs.report(APP, flow.id, {"status": "running", "attempt": 1, "progress": 10})

    assert answer.flow.status is FlowStatus.RUNNING and answer.flow.attempts == 1
    assert answer.flow.run is not None and answer.flow.run.progress == 10
    with pytest.raises(RunConflict) as refused:  # without the attempt, a flow being delivered has no run
        _, other = await stored_flow(h.store, clock=h.clock)
        await h.runs.report(APP, other.id, {"status": "running"})
    assert refused.value.code == "not_running"


async def test_a_report_of_another_attempt_is_refused(h: Harness) -> None:
    _, flow = await h.running()

    with pytest.raises(RunConflict) as refused:
        await h.runs.report(APP, flow.id, {"status": "succeeded", "attempt": 2})

    assert refused.value.code == "stale_attempt" and refused.value.details["attempt"] == 1


async def test_another_apps_flow_is_not_found(h: Harness) -> None:
    _, flow = await h.running()
    other = replace(APP, id="other")

    with pytest.raises(NotFound):
        await h.runs.report(other, flow.id, {"status": "succeeded"})


async def test_a_cancel_is_told_to_the_executor_and_its_stop_ends_the_flow_cancelled(h: Harness) -> None:
    _, flow = await h.running()

    cancelled = await h.runs.cancel(APP, flow.id)
    again = await h.runs.cancel(APP, flow.id)
    heartbeat = await h.runs.report(APP, flow.id, {"status": "running", "progress": 70})
    stopped = await h.runs.report(APP, flow.id, {"status": "failed", "message": "stopped on request"})

    assert cancelled.flow.status is FlowStatus.CANCELLING and cancelled.cancel_requested
    assert cancelled.flow.next_attempt_at_ms == h.clock.now_ms() + 10_000  # the grace
    assert again.repeated and heartbeat.cancel_requested and heartbeat.flow.status is FlowStatus.CANCELLING
    assert stopped.flow.status is FlowStatus.CANCELLED and h.redriven == []
    assert stopped.flow.run is not None and stopped.flow.run.status is RunStatus.CANCELLED
    with pytest.raises(RunConflict) as refused:
        await h.runs.cancel(APP, flow.id)
    assert refused.value.code == "not_running"


async def test_a_run_that_succeeded_despite_a_cancel_is_delivered(h: Harness) -> None:
    _, flow = await h.running()
    await h.runs.cancel(APP, flow.id)

    answer = await h.runs.report(APP, flow.id, {"status": "succeeded"})

    assert answer.flow.status is FlowStatus.DELIVERED


async def test_the_compensator_times_out_a_run_past_its_deadline_and_retries_it(h: Harness) -> None:
    _, flow = await h.running()
    h.clock.advance(RUN_TIMEOUT_MS + 29_000)
    assert await h.compensator().run_once() == 0  # within the grace: left alone

    h.clock.advance(1_000)
    assert await h.compensator().run_once() == 1

    stored = await h.flow(flow)
    assert (stored.status, stored.attempts) == (FlowStatus.PENDING, 1)
    assert stored.run is not None and stored.run.status is RunStatus.TIMED_OUT
    assert stored.last_error == "run timed out after 90 s (attempt 1)"
    [(_, retry)] = h.redriven
    assert retry.status is FlowStatus.PENDING and retry.attempts == 1  # delivery sends attempt 2
    with pytest.raises(RunConflict) as refused:  # the executor's late report
        await h.runs.report(APP, flow.id, {"status": "succeeded", "attempt": 1})
    assert refused.value.code == "run_finished"


async def test_a_cancel_nobody_confirms_ends_cancelled_after_its_grace(h: Harness) -> None:
    _, flow = await h.running()
    await h.runs.cancel(APP, flow.id)
    h.clock.advance(10_000 + 30_000)

    assert await h.compensator().run_once() == 1

    stored = await h.flow(flow)
    assert stored.status is FlowStatus.CANCELLED and h.redriven == []
    assert stored.run is not None and stored.run.status is RunStatus.CANCELLED


async def test_a_report_that_came_first_wins_over_the_timeout(h: Harness) -> None:
    _, flow = await h.running()
    h.clock.advance(RUN_TIMEOUT_MS + 30_000)
    await h.runs.report(APP, flow.id, {"status": "succeeded"})  # late, but before the compensator's pass

    assert await h.compensator().run_once() == 0
    assert (await h.flow(flow)).status is FlowStatus.DELIVERED


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "done"}, "status"),
        ({"status": "timed_out"}, "status"),
        ({"status": ["running"]}, "status"),
        ({"status": "running", "progress": 101}, "progress"),
        ({"status": "running", "progress": ""}, "progress"),
        ({"status": "running", "result": 1}, "result"),
        ({"status": "succeeded", "attempt": 0}, "attempt"),
        ({"status": "succeeded", "message": 5}, "message"),
        ({"status": "succeeded", "colour": "red"}, "colour"),
    ],
)
async def test_a_bad_report_is_refused_naming_its_field(h: Harness, body: dict[str, Any], field: str) -> None:
    _, flow = await h.running()

    with pytest.raises(InvalidInput) as refused:
        await h.runs.report(APP, flow.id, body)

    assert refused.value.field == field and refused.value.status_code == 422


async def test_a_result_past_its_cap_is_413_naming_result(h: Harness) -> None:
    _, flow = await h.running()

    with pytest.raises(FieldTooLarge) as refused:
        await h.runs.report(APP, flow.id, {"status": "succeeded", "result": {"blob": "x" * 300}})

    assert (refused.value.field, refused.value.status_code) == ("result", 413)
    assert (await h.flow(flow)).status is FlowStatus.RUNNING


async def test_log_lines_are_kept_with_the_flow_capped_in_count_and_length(h: Harness) -> None:
    _, flow = await h.running()

    first = await h.runs.append_log(APP, flow.id, {"lines": ["starting", "é" * 40]})
    second = await h.runs.append_log(APP, flow.id, {"lines": ["a", "b", "c", "d"], "attempt": 1})

    assert (first.appended, first.dropped, first.truncated, first.lines) == (2, 0, 1, 2)
    assert (second.appended, second.dropped, second.lines) == (3, 1, 5)
    stored = await h.flow(flow)
    assert stored.run_log is not None and stored.run_log_lines == 5
    lines = [line for line in stored.run_log.splitlines()]
    assert '"line":"starting"' in lines[0] and '"attempt":1' in lines[0]
    assert ("é" * 32) in lines[1] and ("é" * 33) not in lines[1]  # cut at 64 bytes, on a character
    with pytest.raises(InvalidInput) as refused:
        await h.runs.append_log(APP, flow.id, {"lines": "one line"})
    assert refused.value.field == "lines"


class _Counted:
    """Counts the store calls a report makes (issue 30: the bench's statements per run)."""

    def __init__(self, h: Harness) -> None:
        self.calls: list[str] = []
        for name in ("get_flow", "get_task", "flow_with_task", "write_run"):
            setattr(h.store, name, self._counting(name, getattr(h.store, name)))

    def _counting(self, name: str, call: Any) -> Any:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await call(*args, **kwargs)

        return counted

    def taken(self) -> list[str]:
        taken, self.calls = sorted(self.calls), []
        return taken


@pytest.mark.parametrize(
    "reports",
    [
        [{"status": "running", "progress": 40}, {"status": "succeeded", "result": {"rows": 1}}],
        [{"status": "running", "attempt": 1}, {"status": "failed", "message": "disk full"}],
    ],
)
async def test_a_report_reads_its_flow_with_its_task_once_and_answers_the_flow_as_written(
    h: Harness, reports: list[dict[str, Any]]
) -> None:
    # one read of the flow with its task (two reads were two statements) and the flow written is the flow
    # read with the report's change (read back, it cost another)
    _, flow = await h.running()
    counted = _Counted(h)

    for report in reports:
        h.clock.advance(1_000)
        answer = await h.runs.report(APP, flow.id, report)

        assert counted.taken() == ["flow_with_task", "write_run"]
        assert answer.flow == await h.flow(flow)
        counted.taken()  # the test's own read
    cancel_flow = (await h.running())[1]
    counted.taken()
    asked = await h.runs.cancel(APP, cancel_flow.id)
    assert counted.taken() == ["get_flow", "write_run"] and asked.flow == await h.flow(cancel_flow)
