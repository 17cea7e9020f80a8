"""Fixed-delay schedules without a store: the schedule math, the fire planner's park, and the outcome
writer telling the task's owner the next run only once the outcome that set it is written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.unit.test_firing import T0, make_task
from tjobs.clock import ManualClock
from tjobs.delivery.outcomes import OutcomeWriter
from tjobs.firing.planner import FLUSH_SLACK_MS, FirePolicy, plan_fire
from tjobs.hot_tier.base import TaskChange
from tjobs.model import FireIntent, FlowKind, FlowStatus, FlowUpdate, MisfirePolicy, Reschedule, TaskStatus
from tjobs.schedules.fixed_delay import FixedDelaySchedule
from tjobs.specs import CallbackSpec

DELAY_MS = 10_000
POLICY = FirePolicy(misfire_threshold_ms=60_000, catch_up_max=3, max_age_ms=600_000, timeout_ms=2_000)


def fixed(**extra: Any) -> dict[str, Any]:
    return {"kind": "fixed_delay", "delay_ms": DELAY_MS, "start_at_ms": T0, **extra}


def test_the_schedule_starts_at_its_start_then_a_delay_after_each_end() -> None:
    schedule = FixedDelaySchedule(DELAY_MS, T0)
    assert schedule.first_fire(T0 - 5) == T0 and schedule.first_fire(T0) == T0
    assert schedule.first_fire(T0 + 1) == T0 + 1 + DELAY_MS  # resumed after its start
    assert schedule.next_fire(T0 - 1) == T0 and schedule.next_fire(T0 + 700) == T0 + 700 + DELAY_MS
    with pytest.raises(ValueError):
        FixedDelaySchedule(0, T0)


def test_an_on_time_fire_sends_one_flow_and_parks_at_its_bound_plus_the_delay() -> None:
    plan = plan_fire(make_task(fixed(), MisfirePolicy.FIRE_NOW), FireIntent(1, T0, 7), T0 + 40, POLICY)
    assert plan is not None and [(f.kind, f.status) for f in plan.flows] == [(FlowKind.SCHEDULED, FlowStatus.PENDING)]
    assert plan.next_run_at_ms == T0 + 600_000 + 2_000 + FLUSH_SLACK_MS + DELAY_MS
    assert (plan.status, plan.fires_added) == (TaskStatus.ACTIVE, 1)


def test_the_tasks_own_budget_bounds_the_park() -> None:
    callback = CallbackSpec(("http://x",), timeout_ms=500, max_age_s=30)
    plan = plan_fire(make_task(fixed(), MisfirePolicy.FIRE_NOW, callback=callback), FireIntent(1, T0, 7), T0, POLICY)
    assert plan is not None and plan.next_run_at_ms == T0 + 30_000 + 500 + FLUSH_SLACK_MS + DELAY_MS


def test_a_run_timeout_of_the_task_extends_the_park_by_it() -> None:
    # a task whose target runs (README "Job runs"): the run may start as late as max_age_s and last its timeout
    callback = CallbackSpec(("http://x",), timeout_ms=500, max_age_s=30, run_timeout_ms=7_200_000)
    plan = plan_fire(make_task(fixed(), MisfirePolicy.FIRE_NOW, callback=callback), FireIntent(1, T0, 7), T0, POLICY)
    assert plan is not None and plan.next_run_at_ms == T0 + 30_000 + 500 + 7_200_000 + FLUSH_SLACK_MS + DELAY_MS


def test_a_late_fire_is_one_misfire_flow_and_under_skip_a_skipped_flow_a_delay_from_now() -> None:
    late = T0 + 3_600_000
    fired = plan_fire(make_task(fixed(), MisfirePolicy.FIRE_SOON), FireIntent(1, T0, 7), late, POLICY)
    assert fired is not None and [(f.kind, f.missed) for f in fired.flows] == [(FlowKind.MISFIRE, 0)]
    assert fired.next_run_at_ms == late + 2_000 + FLUSH_SLACK_MS + DELAY_MS  # the bound is past: from now
    skipped = plan_fire(make_task(fixed(), MisfirePolicy.SKIP), FireIntent(1, T0, 7), late, POLICY)
    assert skipped is not None and [(f.status, f.missed) for f in skipped.flows] == [(FlowStatus.SKIPPED, 1)]
    assert (skipped.next_run_at_ms, skipped.fires_added) == (late + DELAY_MS, 0)


def test_max_fires_completes_the_task_at_its_last_fire() -> None:
    task = make_task(fixed(max_fires=2), MisfirePolicy.FIRE_NOW, fire_count=1)
    plan = plan_fire(task, FireIntent(1, T0, 7), T0, POLICY)
    assert plan is not None and (plan.status, plan.next_run_at_ms, len(plan.flows)) == (TaskStatus.COMPLETED, None, 1)


class _Recorder:
    def __init__(self) -> None:
        self.fail = False
        self.written: list[FlowUpdate] = []

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        if self.fail:
            raise OSError("database away")
        self.written.extend(updates)


async def test_the_next_run_is_told_to_the_owner_only_after_its_outcome_is_written() -> None:
    recorder, told = _Recorder(), []

    async def publish(change: TaskChange) -> None:
        told.append((change, list(recorder.written)))

    writer = OutcomeWriter(recorder, ManualClock(T0), 0.01, 100, publish)
    moved = FlowUpdate(1, T0, FlowStatus.DELIVERED, 1, None, 200, reschedule=Reschedule("a", T0 + 99, 8, T0 + 500))
    plain = FlowUpdate(2, T0, FlowStatus.DELIVERED, 1, None, 200)
    recorder.fail = True
    writer.put("1-x", moved)
    writer.put("2-x", plain)
    assert not await writer._flush() and told == []  # not written: nothing told
    recorder.fail = False
    assert await writer._flush()
    assert [change for change, _ in told] == [TaskChange(1, "a", T0 + 500, 8)]
    assert told[0][1] == [moved, plain]  # told after the write
