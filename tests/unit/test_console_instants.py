"""A task's next instants on its console page (tjobs.console.instants): the fire path's schedule math,
walked from the task's stored next run."""

from __future__ import annotations

from datetime import datetime

from tjobs.console.instants import next_instants
from tjobs.model import DeliveryMode, MisfirePolicy, Task, TaskStatus
from tjobs.schedules.jitter import JitteredSchedule
from tjobs.schedules.parsing import schedule_of
from tjobs.specs import CallbackSpec, CronSpec, DstGap, IntervalSpec, ScheduleSpec
from tjobs.specs.calendar import CalendarRules

MINUTE = 60_000


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def task(schedule: ScheduleSpec, next_run_at_ms: int | None, fire_count: int = 0, **changes: object) -> Task:
    made = Task(
        id=1,
        app_id="app",
        name="t",
        key=None,
        schedule=schedule,
        callback=CallbackSpec(urls=("https://example.com/hook",)),
        payload=None,
        misfire_policy=MisfirePolicy.FIRE_NOW,
        delivery=DeliveryMode.AT_LEAST_ONCE,
        status=TaskStatus.ACTIVE,
        next_run_at_ms=next_run_at_ms,
        version=1,
        fire_count=fire_count,
        created_at_ms=0,
        updated_at_ms=0,
    )
    for name, value in changes.items():
        setattr(made, name, value)
    return made


def test_the_next_ten_start_at_the_stored_next_run() -> None:
    start = ms("2026-01-01T00:00:00+00:00")
    every_minute = IntervalSpec(every_ms=MINUTE, start_at_ms=start)

    shown = next_instants(task(every_minute, start + 5 * MINUTE))

    assert [i.at_ms for i in shown] == [start + (5 + n) * MINUTE for n in range(10)]
    assert shown[0].utc == "2026-01-01 00:05:00 UTC" and shown[0].local is None


def test_max_fires_counts_the_fires_already_made() -> None:
    start = ms("2026-01-01T00:00:00+00:00")
    three_times = IntervalSpec(every_ms=MINUTE, start_at_ms=start, max_fires=3)

    assert len(next_instants(task(three_times, start + MINUTE, fire_count=1))) == 2


def test_a_completed_task_has_none() -> None:
    daily = CronSpec(expr="0 9 * * *")

    assert next_instants(task(daily, None, status=TaskStatus.COMPLETED)) == []


def test_a_cron_in_a_zone_shows_its_wall_time_across_the_dst_change() -> None:
    # 02:30 Berlin does not exist on 2026-03-29: the gap policy "shift" fires at 03:00 (summer time)
    nightly = CronSpec(expr="30 2 * * *", timezone="Europe/Berlin", dst_gap=DstGap.SHIFT)
    first = ms("2026-03-28T02:30:00+01:00")

    shown = next_instants(task(nightly, first), count=3)

    assert [i.local for i in shown] == [
        "2026-03-28 02:30:00 +0100 Europe/Berlin",
        "2026-03-29 03:00:00 +0200 Europe/Berlin",
        "2026-03-30 02:30:00 +0200 Europe/Berlin",
    ]


def test_a_schedule_naming_a_calendar_skips_what_the_apps_calendar_excludes() -> None:
    friday = ms("2030-01-11T09:00:00+00:00")
    daily = IntervalSpec(every_ms=24 * 60 * MINUTE, start_at_ms=friday, calendar="weekdays-only")
    asked: list[tuple[str, str]] = []

    def calendars(app_id: str, name: str) -> CalendarRules | None:
        asked.append((app_id, name))
        return CalendarRules(weekdays=(6, 7)) if name == "weekdays-only" else None

    shown = next_instants(task(daily, friday), count=3, calendars=calendars)

    assert [i.utc for i in shown] == ["2030-01-11 09:00:00 UTC", "2030-01-14 09:00:00 UTC", "2030-01-15 09:00:00 UTC"]
    assert asked == [("app", "weekdays-only")]  # the task's own app's calendar, as the fire path reads it


def test_a_stored_next_run_the_calendar_now_excludes_is_passed_over_as_the_fire_path_does() -> None:
    saturday = ms("2030-01-12T09:00:00+00:00")  # stored before the calendar came to exclude weekends
    daily = IntervalSpec(every_ms=24 * 60 * MINUTE, start_at_ms=saturday, calendar="weekdays-only")

    shown = next_instants(task(daily, saturday), count=2, calendars=lambda app_id, name: CalendarRules(weekdays=(6, 7)))

    assert [i.utc for i in shown] == ["2030-01-14 09:00:00 UTC", "2030-01-15 09:00:00 UTC"]


def test_a_calendar_the_node_does_not_know_skips_nothing_as_on_the_fire_path() -> None:
    friday = ms("2030-01-11T09:00:00+00:00")
    daily = IntervalSpec(every_ms=24 * 60 * MINUTE, start_at_ms=friday, calendar="gone")

    shown = next_instants(task(daily, friday), count=2, calendars=lambda app_id, name: None)

    assert [i.utc for i in shown] == ["2030-01-11 09:00:00 UTC", "2030-01-12 09:00:00 UTC"]


def test_a_jittered_next_run_whose_nominal_instant_the_calendar_excludes_is_passed_over() -> None:
    saturday = ms("2030-01-12T09:00:00+00:00")
    weekends = CalendarRules(weekdays=(6, 7))
    daily = IntervalSpec(every_ms=24 * 60 * MINUTE, start_at_ms=saturday, jitter_ms=3_600_000, calendar="weekdays-only")
    fires = schedule_of(daily, 1, weekends)
    assert isinstance(fires, JitteredSchedule)
    stored = fires.jittered(saturday)

    shown = next_instants(task(daily, stored), count=2, calendars=lambda app_id, name: weekends)

    monday, tuesday = saturday + 2 * 24 * 60 * MINUTE, saturday + 3 * 24 * 60 * MINUTE
    assert [i.at_ms for i in shown] == [fires.jittered(monday), fires.jittered(tuesday)]
