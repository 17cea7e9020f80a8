"""Schedule math away from DST: cron matching, intervals, one-shots, bounds and the public surface.

DST behaviour is specified in ``test_schedules_dst.py`` and spec validation in
``test_schedules_validation.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from cronsim import CronSim, CronSimError
from hypothesis import given, settings
from hypothesis import strategies as st

import tjobs.schedules
from tjobs.model import ScheduleKind
from tjobs.schedules import CronSchedule, IntervalSchedule, OneShotSchedule, Schedule, parse_schedule
from tjobs.schedules.cronexpr import parse_cron

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def iso(instant_ms: int) -> str:
    return datetime.fromtimestamp(instant_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fires(schedule: Schedule, after_iso: str, count: int) -> list[str]:
    return [iso(t) for t in schedule.occurrences_between(ms(after_iso), ms(after_iso) + 3000 * DAY, count)]


def cron(expr: str, timezone: str = "UTC", **extra: Any) -> Schedule:
    return parse_schedule({"kind": "cron", "expr": expr, "timezone": timezone, **extra})


def test_the_public_surface_is_pinned() -> None:
    assert sorted(tjobs.schedules.__all__) == [
        "CronSchedule",
        "DstGap",
        "DstOverlap",
        "IntervalSchedule",
        "OneShotSchedule",
        "Schedule",
        "normalize_schedule",
        "parse_schedule",
    ]


# ---- cron ----------------------------------------------------------------------------------------

CRON_EXAMPLES = [
    # expr, timezone, after, expected next fires (UTC)
    (
        "0 9 * * *",
        "Asia/Shanghai",
        "2026-11-21T00:59:59Z",
        ["2026-11-21T01:00:00Z", "2026-11-22T01:00:00Z", "2026-11-23T01:00:00Z"],
    ),
    ("0 9 * * *", "Asia/Shanghai", "2026-11-21T01:00:00Z", ["2026-11-22T01:00:00Z", "2026-11-23T01:00:00Z"]),
    (
        "*/15 * * * *",
        "UTC",
        "2026-11-21T10:07:00Z",
        ["2026-11-21T10:15:00Z", "2026-11-21T10:30:00Z", "2026-11-21T10:45:00Z", "2026-11-21T11:00:00Z"],
    ),
    # 6 fields: seconds first
    (
        "*/20 * * * * *",
        "UTC",
        "2026-11-21T10:00:30Z",
        ["2026-11-21T10:00:40Z", "2026-11-21T10:01:00Z", "2026-11-21T10:01:20Z"],
    ),
    ("30 0 9 * * *", "UTC", "2026-11-21T00:00:00Z", ["2026-11-21T09:00:30Z", "2026-11-22T09:00:30Z"]),
    (
        "* * * * * *",
        "UTC",
        "2026-11-21T23:59:58Z",
        ["2026-11-21T23:59:59Z", "2026-11-22T00:00:00Z", "2026-11-22T00:00:01Z"],
    ),
    # day-of-month and day-of-week are OR-ed unless one of them starts with "*"
    (
        "0 0 1 * MON",
        "UTC",
        "2026-11-25T00:00:00Z",
        ["2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z", "2026-12-07T00:00:00Z"],
    ),
    (
        "0 12 * * MON-FRI",
        "UTC",
        "2026-11-20T13:00:00Z",  # a Friday afternoon
        ["2026-11-23T12:00:00Z", "2026-11-24T12:00:00Z"],
    ),
    (
        "0 0 L * *",
        "UTC",
        "2027-01-15T00:00:00Z",
        ["2027-01-31T00:00:00Z", "2027-02-28T00:00:00Z", "2027-03-31T00:00:00Z"],
    ),
    ("0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]),
    ("0 10 * * FRI#1", "UTC", "2026-11-01T00:00:00Z", ["2026-11-06T10:00:00Z", "2026-12-04T10:00:00Z"]),
    ("0 0 1 1 *", "Asia/Kolkata", "2026-06-01T00:00:00Z", ["2026-12-31T18:30:00Z", "2027-12-31T18:30:00Z"]),
    ("@daily", "Europe/Berlin", "2026-11-21T00:00:00Z", ["2026-11-21T23:00:00Z", "2026-11-22T23:00:00Z"]),
    ("@hourly", "UTC", "2026-11-21T10:00:00Z", ["2026-11-21T11:00:00Z", "2026-11-21T12:00:00Z"]),
    ("0 0 * * 7", "UTC", "2026-11-21T00:00:00Z", ["2026-11-22T00:00:00Z", "2026-11-29T00:00:00Z"]),
]


@pytest.mark.parametrize(("expr", "timezone", "after", "expected"), CRON_EXAMPLES)
def test_cron_fires_at_matching_wall_times(expr: str, timezone: str, after: str, expected: list[str]) -> None:
    assert fires(cron(expr, timezone), after, len(expected)) == expected


def test_cron_next_fire_is_strictly_after_even_mid_second() -> None:
    schedule = cron("0 9 * * *", "UTC")
    assert schedule.next_fire(ms("2026-11-21T09:00:00Z") - 1) == ms("2026-11-21T09:00:00Z")
    assert schedule.next_fire(ms("2026-11-21T09:00:00Z")) == ms("2026-11-22T09:00:00Z")
    assert schedule.next_fire(ms("2026-11-21T09:00:00Z") + 999) == ms("2026-11-22T09:00:00Z")


def test_cron_first_fire_includes_now_when_now_is_an_occurrence() -> None:
    schedule = cron("0 9 * * *", "UTC")
    assert schedule.first_fire(ms("2026-11-21T09:00:00Z")) == ms("2026-11-21T09:00:00Z")
    assert schedule.first_fire(ms("2026-11-21T09:00:00Z") + 1) == ms("2026-11-22T09:00:00Z")


def test_cron_bounds_are_inclusive_and_limit_the_fires() -> None:
    start, end = ms("2026-12-01T09:00:00Z"), ms("2026-12-03T09:00:00Z")
    schedule = cron("0 9 * * *", "UTC", start_at_ms=start, end_at_ms=end)
    assert schedule.first_fire(ms("2026-11-21T00:00:00Z")) == ms("2026-12-01T09:00:00Z")
    assert fires(schedule, "2026-11-21T00:00:00Z", 10) == [
        "2026-12-01T09:00:00Z",
        "2026-12-02T09:00:00Z",
        "2026-12-03T09:00:00Z",
    ]
    assert schedule.next_fire(ms("2026-12-03T09:00:00Z")) is None


def test_cron_max_fires_is_carried_for_the_planner() -> None:
    assert cron("0 9 * * *", max_fires=3).max_fires == 3
    assert cron("0 9 * * *").max_fires is None


def test_parse_schedule_reuses_cached_cron_schedules() -> None:
    stored = {
        "kind": "cron",
        "expr": "0 9 * * *",
        "timezone": "Asia/Shanghai",
        "dst_gap": "skip",
        "dst_overlap": "once",
    }
    assert parse_schedule(stored) is parse_schedule(dict(stored))
    assert parse_cron("0 9 * * *") is parse_cron("0 9 * * *")
    assert isinstance(parse_schedule(stored), CronSchedule)
    assert parse_schedule(stored).kind is ScheduleKind.CRON


def test_occurrences_between_is_half_open_and_capped() -> None:
    schedule = cron("0 * * * *")
    start, end = ms("2026-11-21T00:00:00Z"), ms("2026-11-21T05:00:00Z")
    assert [iso(t) for t in schedule.occurrences_between(start, end, 100)] == [
        f"2026-11-21T0{h}:00:00Z" for h in range(1, 6)
    ]
    assert len(schedule.occurrences_between(start, end, 2)) == 2
    assert schedule.occurrences_between(start, start, 10) == []


# A grammar of cron fields, for comparing our matcher with cronsim's own iterator in UTC (no DST).
SECONDS = st.sampled_from(["0", "30", "*/20", "0,59", "15-17", "*/7"])
MINUTES = st.sampled_from(["*", "0", "59", "*/15", "5,35", "10-12", "*/7", "0-59/30"])
HOURS = st.sampled_from(["*", "0", "23", "9-17", "*/6", "2,3", "1-3"])
DAYS = st.sampled_from(["*", "*", "1", "15", "31", "L", "LW", "1-7", "*/10", "29"])
MONTHS = st.sampled_from(["*", "*", "*", "2", "JAN", "1-6", "*/3", "2,12"])
WEEKDAYS = st.sampled_from(["*", "*", "*", "MON", "MON-FRI", "0,6", "5L", "MON#2", "SUN#5"])


@st.composite
def cron_exprs(draw: st.DrawFn) -> str:
    fields = [draw(MINUTES), draw(HOURS), draw(DAYS), draw(MONTHS), draw(WEEKDAYS)]
    if draw(st.booleans()):
        fields.insert(0, draw(SECONDS))
    return " ".join(fields)


@settings(max_examples=150, deadline=None)
@given(expr=cron_exprs(), start_s=st.integers(946_684_800, 2_208_988_800))  # 2000 .. 2040
def test_cron_in_utc_agrees_with_cronsim(expr: str, start_s: int) -> None:
    # Given an expression and a start, our fires in UTC are exactly cronsim's naive iteration.
    start = datetime(1970, 1, 1) + timedelta(seconds=start_s)
    try:
        iterator = CronSim(expr, start)
    except CronSimError:
        return  # an impossible day for every listed month: see the validation tests
    expected = []
    for wall in iterator:  # cronsim stops after 50 years without a match
        expected.append(int((wall - datetime(1970, 1, 1)).total_seconds()) * 1000)
        if len(expected) == 12:
            break
    schedule = cron(expr)
    if not expected:
        assert schedule.occurrences_between(start_s * 1000, start_s * 1000 + 50 * 365 * DAY, 1) == []
        return
    assert schedule.occurrences_between(start_s * 1000, expected[-1], 12) == expected


# ---- interval ------------------------------------------------------------------------------------


def test_interval_fires_at_start_then_every_period_without_drift() -> None:
    schedule = IntervalSchedule(every_ms=30 * SECOND, start_at_ms=ms("2026-11-21T00:00:00Z"))
    assert schedule.first_fire(ms("2026-11-20T00:00:00Z")) == ms("2026-11-21T00:00:00Z")
    assert schedule.first_fire(ms("2026-11-21T00:00:00Z")) == ms("2026-11-21T00:00:00Z")
    assert schedule.first_fire(ms("2026-11-21T00:00:01Z")) == ms("2026-11-21T00:00:30Z")
    # a fire observed late does not move the grid
    assert schedule.next_fire(ms("2026-11-21T00:00:31.234Z")) == ms("2026-11-21T00:01:00Z")
    assert schedule.next_fire(ms("2026-11-21T00:01:00Z")) == ms("2026-11-21T00:01:30Z")


def test_interval_respects_its_end_bound() -> None:
    start = ms("2026-11-21T00:00:00Z")
    schedule = IntervalSchedule(every_ms=HOUR, start_at_ms=start, end_at_ms=start + 2 * HOUR)
    assert schedule.occurrences_between(start - 1, start + DAY, 10) == [start, start + HOUR, start + 2 * HOUR]
    assert schedule.next_fire(start + 2 * HOUR) is None


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, 4_000_000_000_000),
    every=st.integers(1, 10 * DAY),
    after=st.integers(0, 4_000_000_000_000),
)
def test_interval_fires_are_exactly_start_plus_k_periods(start: int, every: int, after: int) -> None:
    schedule = IntervalSchedule(every_ms=every, start_at_ms=start)
    fired = schedule.occurrences_between(after, max(after, start) + 5 * every, 10)
    assert fired, "five periods past the start always hold an occurrence"
    for t in fired:
        k, rest = divmod(t - start, every)
        assert rest == 0 and k >= 0
        assert t > after
    assert fired[0] == start or fired[0] - every <= after  # no occurrence skipped
    assert all(b - a == every for a, b in pairwise(fired))


# ---- one-shots -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [ScheduleKind.AT, ScheduleKind.DELAY])
def test_one_shot_fires_once_at_its_instant(kind: ScheduleKind) -> None:
    at = ms("2026-11-21T09:00:00Z")
    schedule = parse_schedule({"kind": kind.value, "at_ms": at, "delay_ms": 5})
    assert isinstance(schedule, OneShotSchedule)
    assert schedule.kind is kind
    assert schedule.next_fire(at - 1) == at
    assert schedule.next_fire(at) is None
    assert schedule.first_fire(at + HOUR) == at  # even when already past: validation decides
    assert schedule.occurrences_between(0, at + DAY, 10) == [at]
    assert schedule.max_fires is None


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, 10**6),
    every=st.integers(1, 1000),
    end=st.none() | st.integers(0, 10**6),
    after=st.integers(-1000, 10**6),
    span=st.integers(0, 20_000),
    limit=st.integers(0, 50),
)
def test_interval_occurrences_between_is_the_generic_walk_in_closed_form(
    start: int, every: int, end: int | None, after: int, span: int, limit: int
) -> None:
    schedule = IntervalSchedule(every_ms=every, start_at_ms=start, end_at_ms=end)
    walked = Schedule.occurrences_between(schedule, after, after + span, limit)
    assert schedule.occurrences_between(after, after + span, limit) == walked
