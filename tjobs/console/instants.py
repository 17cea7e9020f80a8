"""A task's next instants as the firing path will see them, and how to show an instant in a zone.

Pure: the schedule math is the fire path's own (:func:`tjobs.schedules.parsing.schedule_of`, jittered
for the task), walked from the task's stored next run, and ``max_fires`` counts the fires the task
already had. A schedule naming a calendar skips what the task's app's calendar of that name excludes,
as this node knows it (``calendars``: the fire path's lookup, :meth:`CalendarService.rules
<tjobs.service.calendars.CalendarService.rules>`); a stored next run it now excludes is passed over, as the
planner passes it over when it comes, and a calendar the node does not know skips nothing, as there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from tjobs.model import Task, TaskStatus
from tjobs.schedules.calendars import excluded
from tjobs.schedules.jitter import JitteredSchedule
from tjobs.schedules.parsing import schedule_of, schedule_zone
from tjobs.specs import CronSpec
from tjobs.specs.calendar import CalendarLookup


@dataclass(frozen=True, slots=True)
class Instant:
    at_ms: int
    utc: str  # 2026-03-29 01:30:00 UTC
    local: str | None  # the same instant in the schedule's zone (cron schedules not in UTC), with its offset


def next_instants(task: Task, count: int = 10, calendars: CalendarLookup | None = None) -> list[Instant]:
    """The next ``count`` instants the task will fire at, from its stored next run (none once completed),
    less those its app's calendar excludes (``calendars``: the lookup the fire planner is given)."""
    if task.status is TaskStatus.COMPLETED or task.next_run_at_ms is None:
        return []
    name = getattr(task.schedule, "calendar", None)
    calendar = None if name is None or calendars is None else calendars(task.app_id, name)
    schedule = schedule_of(task.schedule, task.id, calendar)  # as the task fires: jittered, its calendar applied
    limit = count
    if schedule.max_fires is not None:
        limit = min(count, max(schedule.max_fires - task.fire_count, 0))
    found: list[int] = []
    stored = task.next_run_at_ms
    instant: int | None = stored
    nominal = schedule.nominal_of(stored) if isinstance(schedule, JitteredSchedule) else stored
    if calendar is not None and excluded(calendar, schedule_zone(task.schedule), nominal):
        instant = schedule.next_fire(stored)  # the planner records no flow for it and moves on
    while instant is not None and len(found) < limit:
        found.append(instant)
        instant = schedule.next_fire(instant)
    zone = task.schedule.timezone if isinstance(task.schedule, CronSpec) else "UTC"
    return [shown(at_ms, zone) for at_ms in found]


def shown(at_ms: int, zone: str) -> Instant:
    moment = datetime.fromtimestamp(at_ms / 1000, UTC)
    utc = moment.strftime("%Y-%m-%d %H:%M:%S") + (f".{at_ms % 1000:03d}" if at_ms % 1000 else "") + " UTC"
    local = None
    if zone != "UTC":
        there = moment.astimezone(ZoneInfo(zone))
        local = there.strftime("%Y-%m-%d %H:%M:%S %z ") + zone
    return Instant(at_ms, utc, local)
