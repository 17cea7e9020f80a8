"""The fire planner: what one fire records and where the task goes next, per misfire policy."""

from __future__ import annotations

from typing import Any

import pytest

from tjobs.firing.planner import FirePolicy, plan_fire
from tjobs.model import (
    DeliveryMode,
    FireIntent,
    FlowKind,
    FlowStatus,
    MisfirePolicy,
    Task,
    TaskStatus,
)
from tjobs.specs import CallbackSpec, schedule_from_json

T0 = 1_790_000_000_000  # a fixed instant; every schedule below is anchored on it
SECOND = 1000
POLICY = FirePolicy(misfire_threshold_ms=60 * SECOND, catch_up_max=3)


def make_task(schedule: dict[str, Any], policy: MisfirePolicy = MisfirePolicy.FIRE_SOON, **extra: Any) -> Task:
    fields: dict[str, Any] = {
        "id": 1,
        "app_id": "a",
        "name": "t",
        "key": None,
        "schedule": schedule_from_json(schedule),
        "callback": CallbackSpec(("http://x",)),
        "payload": None,
        "misfire_policy": policy,
        "delivery": DeliveryMode.AT_LEAST_ONCE,
        "status": TaskStatus.ACTIVE,
        "next_run_at_ms": T0,
        "version": 7,
        "fire_count": 0,
        "created_at_ms": T0 - 1000,
        "updated_at_ms": T0 - 1000,
    }
    fields.update(extra)
    return Task(**fields)


def every(seconds: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "interval", "every_ms": seconds * SECOND, "start_at_ms": T0, **extra}


AT = {"kind": "at", "at_ms": T0}


def test_on_time_recurring_fire_records_one_pending_flow_and_advances_one_period() -> None:
    plan = plan_fire(make_task(every(30)), FireIntent(1, T0, 7), T0 + 5, POLICY)
    assert plan is not None
    [flow] = plan.flows
    assert (flow.scheduled_at_ms, flow.kind, flow.status, flow.attempts) == (
        T0,
        FlowKind.SCHEDULED,
        FlowStatus.PENDING,
        0,
    )
    assert plan.next_run_at_ms == T0 + 30 * SECOND
    assert plan.status is TaskStatus.ACTIVE
    assert plan.fires_added == 1


def test_one_shot_fire_completes_the_task() -> None:
    plan = plan_fire(make_task(AT, MisfirePolicy.FIRE_NOW), FireIntent(1, T0, 7), T0 + 2, POLICY)
    assert plan is not None
    assert plan.next_run_at_ms is None
    assert plan.status is TaskStatus.COMPLETED
    assert [f.status for f in plan.flows] == [FlowStatus.PENDING]


def test_at_most_once_flow_is_recorded_as_sending_its_single_attempt() -> None:
    task = make_task(AT, delivery=DeliveryMode.AT_MOST_ONCE)
    plan = plan_fire(task, FireIntent(1, T0, 7), T0, POLICY)
    assert plan is not None
    assert [(f.status, f.attempts) for f in plan.flows] == [(FlowStatus.SENDING, 1)]


def test_a_fire_exactly_at_the_threshold_is_not_a_misfire() -> None:
    plan = plan_fire(make_task(every(1)), FireIntent(1, T0, 7), T0 + 60 * SECOND, POLICY)
    assert plan is not None
    assert plan.flows[0].kind is FlowKind.SCHEDULED


@pytest.mark.parametrize("policy", [MisfirePolicy.FIRE_NOW, MisfirePolicy.FIRE_SOON])
def test_fire_now_and_fire_soon_collapse_missed_occurrences_into_one_fire(policy: MisfirePolicy) -> None:
    now = T0 + 10 * 60 * SECOND + 5  # 10 minutes late on a 1-minute interval
    plan = plan_fire(make_task(every(60), policy), FireIntent(1, T0, 7), now, POLICY)
    assert plan is not None
    [flow] = plan.flows
    assert (flow.kind, flow.status, flow.missed) == (FlowKind.MISFIRE, FlowStatus.PENDING, 10)
    assert plan.next_run_at_ms == T0 + 11 * 60 * SECOND  # the next future occurrence
    assert plan.fires_added == 1


def test_skip_records_the_miss_without_sending_and_moves_to_the_future() -> None:
    now = T0 + 10 * 60 * SECOND + 5
    plan = plan_fire(make_task(every(60), MisfirePolicy.SKIP), FireIntent(1, T0, 7), now, POLICY)
    assert plan is not None
    [flow] = plan.flows
    assert (flow.status, flow.missed) == (FlowStatus.SKIPPED, 11)
    assert plan.next_run_at_ms == T0 + 11 * 60 * SECOND
    assert plan.fires_added == 0


def test_skip_of_a_one_shot_task_completes_it_with_a_skipped_flow() -> None:
    plan = plan_fire(make_task(AT, MisfirePolicy.SKIP), FireIntent(1, T0, 7), T0 + 3_600 * SECOND, POLICY)
    assert plan is not None
    assert [f.status for f in plan.flows] == [FlowStatus.SKIPPED]
    assert plan.status is TaskStatus.COMPLETED


def test_fire_now_on_a_late_one_shot_task_fires_it_once() -> None:
    plan = plan_fire(make_task(AT, MisfirePolicy.FIRE_NOW), FireIntent(1, T0, 7), T0 + 3_600 * SECOND, POLICY)
    assert plan is not None
    assert [(f.kind, f.status) for f in plan.flows] == [(FlowKind.MISFIRE, FlowStatus.PENDING)]
    assert plan.status is TaskStatus.COMPLETED


def test_catch_up_within_the_cap_fires_each_missed_occurrence_in_turn() -> None:
    now = T0 + 2 * 60 * SECOND + 5  # occurrences T0, T0+60s, T0+120s are behind: 3 <= cap
    plan = plan_fire(make_task(every(60), MisfirePolicy.CATCH_UP), FireIntent(1, T0, 7), now, POLICY)
    assert plan is not None
    assert [(f.scheduled_at_ms, f.status) for f in plan.flows] == [(T0, FlowStatus.PENDING)]
    assert plan.next_run_at_ms == T0 + 60 * SECOND  # still in the past: the runner paces it


def test_catch_up_beyond_the_cap_skips_the_oldest_surplus_and_keeps_the_newest() -> None:
    now = T0 + 9 * 60 * SECOND + 5  # 10 occurrences behind, cap 3
    plan = plan_fire(make_task(every(60), MisfirePolicy.CATCH_UP), FireIntent(1, T0, 7), now, POLICY)
    assert plan is not None
    [flow] = plan.flows
    assert (flow.status, flow.missed) == (FlowStatus.SKIPPED, 7)
    assert plan.next_run_at_ms == T0 + 7 * 60 * SECOND  # the first of the newest three


def test_max_fires_completes_the_task_after_the_last_allowed_fire() -> None:
    task = make_task(every(30, max_fires=3), fire_count=2)
    plan = plan_fire(task, FireIntent(1, T0, 7), T0, POLICY)
    assert plan is not None
    assert plan.status is TaskStatus.COMPLETED
    assert plan.next_run_at_ms is None
    assert len(plan.flows) == 1
