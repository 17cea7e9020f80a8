"""Calendars: rules and iCalendar parsed with field-named errors; excluded instants skipped in the
schedule's zone (DST included), by the preview and by the fire planner, which reads the calendar as it
is at every fire."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_firing import POLICY, T0, make_task
from tjobs.errors import InvalidInput
from tjobs.firing.planner import FirePlanner, plan_fire
from tjobs.model import FireIntent, TaskStatus
from tjobs.schedules.calendars import MAX_EXCLUDED_RUN, excluded, parse_calendar_rules
from tjobs.schedules.ical import parse_ical
from tjobs.schedules.parsing import schedule_of
from tjobs.schedules.preview import preview
from tjobs.service.calendars import parse_calendar_request
from tjobs.specs import CronSpec, DstGap, DstOverlap, IntervalSpec
from tjobs.specs.calendar import CalendarRules, calendar_rules_from_json, calendar_rules_to_json

HOUR = 3_600_000
DAY = 24 * HOUR


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def local(at_ms: int, zone: str) -> datetime:
    return datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(ZoneInfo(zone))


# ---- rules ---------------------------------------------------------------------------------------


def test_a_request_is_parsed_sorted_and_round_trips_through_json() -> None:
    body = {
        "dates": ["2026-12-25", "2026-12-25", "2026-01-01"],
        "ranges": [{"from": "2026-12-24", "to": "2027-01-01"}],
        "weekdays": ["sun", "Saturday"],
        "annual": ["05-01"],
        "periods": [{"from": "2026-12-31T18:00", "to": "2027-01-01T06:00:00"}],
    }
    rules = parse_calendar_rules(body)
    assert rules == CalendarRules(
        ("2026-01-01", "2026-12-25"),
        (("2026-12-24", "2027-01-01"),),
        (6, 7),
        ("05-01",),
        (("2026-12-31T18:00:00", "2027-01-01T06:00:00"),),
    )
    assert calendar_rules_from_json(calendar_rules_to_json(rules)) == rules


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"dates": "2026-12-25"}, "dates", "invalid_type"),
        ({"dates": ["2026-13-01"]}, "dates[0]", "invalid_date"),
        ({"dates": ["2026-12-25", 20261225]}, "dates[1]", "invalid_type"),
        ({"ranges": [{"from": "2026-12-24"}]}, "ranges[0].to", "missing"),
        ({"ranges": [{"from": "2026-12-24", "to": "2026-12-01"}]}, "ranges[0].to", "out_of_range"),
        ({"ranges": [{"from": "2026-12-24", "to": "2026-12-25", "x": 1}]}, "ranges[0].x", "unknown_field"),
        ({"weekdays": ["funday"]}, "weekdays[0]", "invalid_choice"),
        ({"annual": ["02-30"]}, "annual[0]", "invalid_date"),
        (
            {"periods": [{"from": "2026-12-31T18:00:00+01:00", "to": "2027-01-01T06:00:00"}]},
            "periods[0].from",
            "invalid_date",
        ),
        ({"dates": ["2026-12-25"] * 1001}, "dates", "out_of_range"),
        ({"colour": "red"}, "colour", "unknown_field"),
        ({"timezone": "Mars/Olympus"}, "timezone", "unknown_timezone"),
        ({"ical": 5}, "ical", "invalid_type"),
        ({"ical": "hello"}, "ical", "invalid_ical"),
    ],
)
def test_a_bad_calendar_is_refused_naming_the_field(body: dict[str, Any], field: str, code: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_calendar_request(body)
    assert (refused.value.field, refused.value.code) == (field, code)


# ---- iCalendar -----------------------------------------------------------------------------------

ICAL = """BEGIN:VCALENDAR\r
VERSION:2.0\r
BEGIN:VEVENT\r
SUMMARY:Christmas\r
DTSTART;VALUE=DATE:20261225\r
DTEND;VALUE=DATE:20261227\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260501\r
RRULE:FREQ=YEARLY\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260103\r
RRULE:FREQ=WEEKLY;BYDAY=SA,SU\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;TZID=Europe/Berlin:20261231T180000\r
DTEND;TZID=Europe/Berlin:20270101T060000\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART:20260704T120000Z\r
DTEND:20260704T13\r
 0000Z\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20261001\r
END:VEVENT\r
END:VCALENDAR\r
"""


def test_an_icalendar_text_becomes_dates_ranges_month_days_weekdays_and_periods() -> None:
    rules = parse_ical(ICAL, "ical", "America/New_York")
    assert rules.dates == ("2026-10-01",)
    assert rules.ranges == (("2026-12-25", "2026-12-26"),)  # DTEND is exclusive
    assert rules.annual == ("05-01",)
    assert rules.weekdays == (6, 7)
    assert rules.periods == (
        ("2026-07-04T08:00:00", "2026-07-04T09:00:00"),  # UTC, read in the zone given (EDT), unfolded
        ("2026-12-31T18:00:00", "2027-01-01T06:00:00"),  # TZID: its wall time
    )


@pytest.mark.parametrize(
    ("text", "code", "line"),
    [
        (
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\nRRULE:FREQ=MONTHLY\nEND:VEVENT\n",
            "unsupported_ical",
            4,
        ),
        (
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\nRRULE:FREQ=YEARLY;COUNT=3\nEND:VEVENT\n",
            "unsupported_ical",
            4,
        ),
        (
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20261225T100000\nRRULE:FREQ=WEEKLY\nEND:VEVENT\n",
            "unsupported_ical",
            4,
        ),
        ("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:2026122\nEND:VEVENT\n", "invalid_ical", 3),
        ("BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:x\nEND:VEVENT\n", "invalid_ical", 4),
        (
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20261225T100000\nDTEND:20261225T090000\nEND:VEVENT\n",
            "invalid_ical",
            3,
        ),
        ("BEGIN:VCALENDAR\nEND:VEVENT\n", "invalid_ical", 2),
        ("BEGIN:VCALENDAR\nno colon here\n", "invalid_ical", 2),
    ],
)
def test_an_icalendar_text_beyond_what_is_taken_is_refused_naming_the_line(text: str, code: str, line: int) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_ical(text, "ical")
    assert (refused.value.field, refused.value.code) == ("ical", code)
    assert f"line {line}" in str(refused.value)


def test_an_unended_event_is_refused() -> None:
    with pytest.raises(InvalidInput, match="not ended"):
        parse_ical("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\n", "ical")


# ---- exclusions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "instant", "zone", "expected"),
    [
        (CalendarRules(dates=("2026-12-25",)), "2026-12-25T09:00:00+08:00", "Asia/Shanghai", True),
        (CalendarRules(dates=("2026-12-25",)), "2026-12-25T01:00:00+00:00", "Asia/Shanghai", True),  # 09:00 there
        (CalendarRules(dates=("2026-12-25",)), "2026-12-24T17:00:00+00:00", "Asia/Shanghai", True),  # 01:00 on the 25th
        (CalendarRules(dates=("2026-12-25",)), "2026-12-25T20:00:00+00:00", "Asia/Shanghai", False),  # the 26th there
        (CalendarRules(ranges=(("2026-12-24", "2027-01-01"),)), "2027-01-01T23:59:59+00:00", "UTC", True),
        (CalendarRules(ranges=(("2026-12-24", "2027-01-01"),)), "2027-01-02T00:00:00+00:00", "UTC", False),
        (CalendarRules(weekdays=(6, 7)), "2026-11-21T09:00:00+00:00", "UTC", True),  # a Saturday
        (CalendarRules(weekdays=(6, 7)), "2026-11-23T09:00:00+00:00", "UTC", False),
        (CalendarRules(annual=("05-01",)), "2031-05-01T12:00:00+02:00", "Europe/Berlin", True),
        (
            CalendarRules(periods=(("2026-12-31T18:00:00", "2027-01-01T06:00:00"),)),
            "2027-01-01T05:59:59+01:00",
            "Europe/Berlin",
            True,
        ),
        (
            CalendarRules(periods=(("2026-12-31T18:00:00", "2027-01-01T06:00:00"),)),
            "2027-01-01T06:00:00+01:00",
            "Europe/Berlin",
            False,
        ),
    ],
)
def test_an_instant_is_judged_by_its_wall_time_in_the_zone(
    rules: CalendarRules, instant: str, zone: str, expected: bool
) -> None:
    assert excluded(rules, zone, ms(instant)) is expected


def test_overlapping_ranges_exclude_their_union() -> None:
    rules = CalendarRules(ranges=(("2026-01-01", "2026-01-31"), ("2026-01-05", "2026-01-10")))
    assert excluded(rules, "UTC", ms("2026-01-20T00:00:00+00:00"))


WEEKEND_AND_HOLIDAYS = CalendarRules(
    dates=("2026-03-09", "2026-10-26", "2026-11-02"),
    ranges=(("2026-12-24", "2027-01-01"),),
    weekdays=(6, 7),
    annual=("07-04",),
    periods=(("2026-03-29T01:00:00", "2026-03-29T04:00:00"), ("2026-11-01T01:00:00", "2026-11-01T02:00:00")),
)
DST_CRONS = [
    CronSpec("30 2 * * *", "Europe/Berlin", DstGap.SKIP, calendar="c"),
    CronSpec("30 2 * * *", "Europe/Berlin", DstGap.SHIFT, DstOverlap.TWICE, calendar="c"),
    CronSpec("30 1 * * *", "America/New_York", DstGap.SHIFT, DstOverlap.TWICE, calendar="c"),
    CronSpec("0 * * * *", "America/New_York", calendar="c"),
    CronSpec("0 9 * * 1-5", "Europe/Berlin", calendar="c"),
]


@pytest.mark.parametrize("spec", DST_CRONS, ids=lambda s: f"{s.timezone}-{s.expr}-{s.dst_gap}-{s.dst_overlap}")
@given(start_day=st.integers(0, 400))
@settings(max_examples=20, deadline=None)
def test_the_preview_is_the_schedule_less_the_excluded_instants_across_dst(spec: CronSpec, start_day: int) -> None:
    now = ms("2026-01-01T00:00:00+00:00") + start_day * DAY
    plain = preview(spec, now_ms=now, count=2000).occurrences
    kept = preview(spec, now_ms=now, count=60, calendar=WEEKEND_AND_HOLIDAYS).occurrences
    expected = [o.at_ms for o in plain if not excluded(WEEKEND_AND_HOLIDAYS, spec.timezone, o.at_ms)][: len(kept)]
    assert [o.at_ms for o in kept] == expected
    for occurrence in kept:
        wall = local(occurrence.at_ms, spec.timezone)
        assert wall.isoweekday() < 6 and wall.date().isoformat() not in WEEKEND_AND_HOLIDAYS.dates
        assert not (date(2026, 12, 24) <= wall.date() <= date(2027, 1, 1)) and (wall.month, wall.day) != (7, 4)


def test_a_calendar_excluding_everything_never_ends_the_task() -> None:
    schedule = schedule_of(IntervalSpec(HOUR, T0, calendar="c"), calendar=CalendarRules(weekdays=tuple(range(1, 8))))
    found = schedule.next_fire(T0)
    assert found == T0 + MAX_EXCLUDED_RUN * HOUR + HOUR  # answered anyway; the planner passes over it


def test_the_preview_applies_the_calendar_to_jittered_instants_too() -> None:
    spec = IntervalSpec(DAY, ms("2026-11-16T09:00:00+00:00"), jitter_ms=HOUR, calendar="c")  # a Monday
    shown = preview(spec, now_ms=spec.start_at_ms, count=6, seed=9, calendar=CalendarRules(weekdays=(6, 7)))
    days = [local(o.at_ms, "UTC").strftime("%a %d") for o in shown.occurrences]
    assert days == ["Mon 16", "Tue 17", "Wed 18", "Thu 19", "Fri 20", "Mon 23"]
    for occurrence in shown.occurrences:
        assert occurrence.fires_at_ms is not None and 0 <= occurrence.fires_at_ms - occurrence.at_ms <= HOUR


# ---- the fire planner ----------------------------------------------------------------------------


def daily_task(**schedule: Any) -> Any:
    start = ms("2026-11-20T09:00:00+00:00")  # a Friday
    return make_task(
        {"kind": "interval", "every_ms": DAY, "start_at_ms": start, "calendar": "c", **schedule}, next_run_at_ms=start
    )


def test_the_next_run_skips_what_the_calendar_excludes_now() -> None:
    task = daily_task()
    planner = FirePlanner(POLICY, calendars=lambda app, name: CalendarRules(weekdays=(6, 7)) if name == "c" else None)
    plan = planner(task, FireIntent(1, task.next_run_at_ms, 7), task.next_run_at_ms + 5)
    assert plan is not None and [f.scheduled_at_ms for f in plan.flows] == [task.next_run_at_ms]
    assert plan.next_run_at_ms == ms("2026-11-23T09:00:00+00:00")  # Monday: the weekend skipped


def test_an_instant_the_calendar_came_to_exclude_records_no_flow_and_moves_on() -> None:
    task = daily_task()
    friday = task.next_run_at_ms
    plan = plan_fire(task, FireIntent(1, friday, 7), friday + 5, POLICY, CalendarRules(dates=("2026-11-20",)))
    assert plan is not None and plan.flows == [] and plan.fires_added == 0
    assert (plan.next_run_at_ms, plan.status) == (friday + DAY, TaskStatus.ACTIVE)


def test_a_calendar_the_node_does_not_know_skips_nothing() -> None:
    task = daily_task()
    plan = FirePlanner(POLICY, calendars=lambda app, name: None)(
        task, FireIntent(1, task.next_run_at_ms, 7), task.next_run_at_ms
    )
    assert plan is not None and len(plan.flows) == 1 and plan.next_run_at_ms == task.next_run_at_ms + DAY


def test_with_jitter_an_excluded_nominal_instant_is_skipped_and_the_flow_keeps_its_nominal_instant() -> None:
    task = daily_task(jitter_ms=HOUR)
    weekend = CalendarRules(weekdays=(6, 7))
    schedule = schedule_of(task.schedule, task.id, weekend)
    due = schedule.first_fire(task.next_run_at_ms)
    assert due is not None
    plan = plan_fire(task, FireIntent(1, due, 7), due + 5, POLICY, weekend)
    assert plan is not None and plan.flows[0].scheduled_at_ms == task.next_run_at_ms
    monday = ms("2026-11-23T09:00:00+00:00")
    assert monday <= plan.next_run_at_ms <= monday + HOUR  # type: ignore[operator]
    assert timedelta(milliseconds=plan.next_run_at_ms - due) > timedelta(days=2)  # type: ignore[operator]
