"""Jitter: a reproducible offset in [0, jitter_ms] per nominal instant; flows keep the nominal instant,
so jitter never adds a flow, skips an instant, or fires before the nominal instant."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_firing import POLICY, T0, make_task
from tjobs.errors import InvalidInput
from tjobs.firing.planner import flow_instant, plan_fire
from tjobs.model import FireIntent, FlowKind, FlowStatus, MisfirePolicy
from tjobs.schedules.jitter import JitteredSchedule, jitter_offset_ms
from tjobs.schedules.parsing import parse_schedule_request, schedule_of
from tjobs.schedules.preview import preview
from tjobs.settings import LimitSettings
from tjobs.specs import CronSpec, DstOverlap, IntervalSpec, schedule_to_json
from tjobs.wire import MAX_JITTER_MS

MINUTE = 60_000
HOUR = 60 * MINUTE
NOW = 1_795_251_600_000  # 2026-11-21T09:00:00Z
LIMITS = LimitSettings()


def jittered(spec: CronSpec | IntervalSpec, seed: int) -> JitteredSchedule:
    schedule = schedule_of(spec, seed)
    assert isinstance(schedule, JitteredSchedule)
    return schedule


def nominal_instants(spec: CronSpec | IntervalSpec, after_ms: int, count: int) -> list[int]:
    schedule, found, cursor = schedule_of(spec), [], after_ms
    for _ in range(count):
        cursor = schedule.next_fire(cursor)  # type: ignore[assignment]
        found.append(cursor)
    return found


SPECS = [
    IntervalSpec(MINUTE, T0, jitter_ms=MINUTE),
    IntervalSpec(30_000, T0, jitter_ms=10_000),
    CronSpec("0 9 * * *", "Asia/Shanghai", jitter_ms=HOUR),
    CronSpec("30 1 * * *", "Europe/Berlin", dst_overlap=DstOverlap.TWICE, jitter_ms=HOUR),  # 1 h apart in October
    CronSpec("*/5 * * * *", "America/New_York", jitter_ms=5 * MINUTE),
]


@pytest.mark.parametrize(
    ("seed", "nominal_ms", "jitter_ms"),
    [(1, T0, 0), (1, T0, 1), (7, T0, MINUTE), (123456789, T0 + 17, HOUR), (2**63 - 1, 0, MAX_JITTER_MS)],
)
def test_the_offset_is_within_the_jitter_and_the_same_every_time(seed: int, nominal_ms: int, jitter_ms: int) -> None:
    offset = jitter_offset_ms(seed, nominal_ms, jitter_ms)
    assert 0 <= offset <= jitter_ms
    assert offset == jitter_offset_ms(seed, nominal_ms, jitter_ms)


def test_tasks_with_the_same_schedule_are_spread_over_the_window() -> None:
    offsets = {jitter_offset_ms(seed, T0, HOUR) for seed in range(200)}
    assert len(offsets) > 190 and min(offsets) < 10 * MINUTE and max(offsets) > 50 * MINUTE


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.kind}-{getattr(s, 'expr', '')}")
@given(seed=st.integers(0, 2**63 - 1), start_s=st.integers(0, 400 * 86_400))
@settings(max_examples=25, deadline=None)
def test_each_nominal_instant_fires_once_never_early_and_in_order(
    spec: CronSpec | IntervalSpec, seed: int, start_s: int
) -> None:
    schedule = jittered(spec, seed)
    nominal = nominal_instants(spec, T0 + start_s * 1000, 40)
    fired, cursor = [], schedule.jittered(nominal[0])
    fired.append(cursor)
    while len(fired) < len(nominal):
        cursor = schedule.next_fire(cursor)  # type: ignore[assignment]
        fired.append(cursor)
    assert [schedule.nominal_of(at) for at in fired] == nominal  # none skipped, none twice
    for at, n, following in zip(fired, nominal, nominal[1:], strict=False):
        assert n <= at <= n + spec.jitter_ms  # type: ignore[operator]
        assert at < following


def test_without_a_seed_or_a_jitter_the_schedule_is_the_nominal_one() -> None:
    assert not isinstance(schedule_of(IntervalSpec(MINUTE, T0, jitter_ms=MINUTE)), JitteredSchedule)
    assert not isinstance(schedule_of(IntervalSpec(MINUTE, T0), 5), JitteredSchedule)


def jittered_task(policy: MisfirePolicy = MisfirePolicy.FIRE_SOON, **extra: Any) -> Any:
    spec = {"kind": "interval", "every_ms": MINUTE, "start_at_ms": T0, "jitter_ms": 30_000}
    task = make_task(spec, policy, id=42, **extra)
    task.next_run_at_ms = schedule_of(task.schedule, 42).first_fire(T0)
    return task


def test_an_on_time_fire_records_the_nominal_instant_and_moves_to_the_next_jittered_one() -> None:
    task = jittered_task()
    schedule = jittered(task.schedule, 42)
    due = task.next_run_at_ms
    assert T0 <= due <= T0 + 30_000
    plan = plan_fire(task, FireIntent(42, due, 7), due + 5, POLICY)
    assert plan is not None
    [flow] = plan.flows
    assert (flow.scheduled_at_ms, flow.kind) == (T0, FlowKind.SCHEDULED)
    assert plan.next_run_at_ms == schedule.jittered(T0 + MINUTE)
    assert flow_instant(task, due) == T0


@pytest.mark.parametrize(
    ("policy", "status", "next_nominal"),
    [
        (MisfirePolicy.FIRE_NOW, FlowStatus.PENDING, T0 + 11 * MINUTE),
        (MisfirePolicy.SKIP, FlowStatus.SKIPPED, T0 + 11 * MINUTE),
        (MisfirePolicy.CATCH_UP, FlowStatus.SKIPPED, T0 + 8 * MINUTE),  # cap 3: the newest 3 of 11 remain
    ],
)
def test_a_misfire_keys_its_flow_by_the_nominal_instant(
    policy: MisfirePolicy, status: FlowStatus, next_nominal: int
) -> None:
    task = jittered_task(policy)
    schedule = jittered(task.schedule, 42)
    now = T0 + 10 * MINUTE + 45_000
    plan = plan_fire(task, FireIntent(42, task.next_run_at_ms, 7), now, POLICY)
    assert plan is not None and plan.next_run_at_ms is not None
    [flow] = plan.flows
    assert (flow.scheduled_at_ms, flow.status) == (T0, status)
    assert schedule.nominal_of(plan.next_run_at_ms) == next_nominal
    assert plan.next_run_at_ms == schedule.jittered(next_nominal)


def test_an_instant_jittered_under_another_seed_still_fires_once() -> None:
    """A row whose next run was computed before its id changed (or before jitter was set) still
    records its nominal instant, and its next run is a later nominal instant's."""
    task = jittered_task()
    for due in (T0, T0 + 29_999):
        plan = plan_fire(task, FireIntent(42, due, 7), due + 5, POLICY)
        assert plan is not None and plan.next_run_at_ms is not None
        assert plan.flows[0].scheduled_at_ms == T0
        assert jittered(task.schedule, 42).nominal_of(plan.next_run_at_ms) == T0 + MINUTE


@pytest.mark.parametrize(
    ("schedule", "code"),
    [
        ({"kind": "interval", "every_ms": MINUTE, "jitter_ms": MINUTE + 1}, "jitter_too_large"),
        ({"kind": "cron", "expr": "*/5 * * * *", "jitter_ms": 5 * MINUTE + 1}, "jitter_too_large"),
        ({"kind": "cron", "expr": "0 9 * * *", "jitter_ms": MAX_JITTER_MS + 1}, "out_of_range"),
        ({"kind": "interval", "every_ms": MINUTE, "jitter_ms": -1}, "out_of_range"),
        ({"kind": "interval", "every_ms": MINUTE, "jitter_ms": "5"}, "invalid_type"),
        ({"kind": "interval", "every_ms": MINUTE, "jitter_ms": True}, "invalid_type"),
        ({"kind": "at", "at_ms": NOW + 1000, "jitter_ms": 5}, "unknown_field"),
        ({"kind": "delay", "delay_ms": 1000, "jitter_ms": 5}, "unknown_field"),
    ],
)
def test_a_bad_jitter_is_refused_naming_the_field(schedule: dict[str, Any], code: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_schedule_request(schedule, now_ms=NOW, limits=LIMITS, misfire_threshold_ms=60_000)
    assert (refused.value.field, refused.value.code) == ("schedule.jitter_ms", code)


@pytest.mark.parametrize(("given_ms", "stored"), [(0, None), (None, None), (1500, 1500), (MINUTE, MINUTE)])
def test_a_jitter_is_stored_and_zero_is_none(given_ms: int | None, stored: int | None) -> None:
    request = {"kind": "interval", "every_ms": MINUTE, "jitter_ms": given_ms}
    spec = parse_schedule_request(request, now_ms=NOW, limits=LIMITS, misfire_threshold_ms=60_000)
    assert spec.jitter_ms == stored  # type: ignore[union-attr]
    assert ("jitter_ms" in schedule_to_json(spec)) == (stored is not None)


def test_the_preview_shows_each_nominal_instant_and_where_that_task_fires_it() -> None:
    spec = IntervalSpec(MINUTE, T0, jitter_ms=30_000)
    shown = preview(spec, now_ms=T0, count=5, seed=42)
    schedule = jittered(spec, 42)
    assert [o.at_ms for o in shown.occurrences] == [T0 + k * MINUTE for k in range(5)]
    assert [o.fires_at_ms for o in shown.occurrences] == [schedule.jittered(o.at_ms) for o in shown.occurrences]
    assert shown.occurrences[0].fires_at_ms == schedule_of(spec, 42).first_fire(T0)
    assert all(o.fires_at_ms is None for o in preview(IntervalSpec(MINUTE, T0), now_ms=T0, count=2).occurrences)
