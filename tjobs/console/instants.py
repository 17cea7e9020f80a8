"""A task's next instants as the firing path will see them, and how to show an instant in a zone.

Pure: the schedule math is the fire path's own (:func:`tjobs.schedules.parsing.schedule_of`, jittered
for the task), walked from the task's stored next run, and ``max_fires`` counts the fires the task
already had. Instants a calendar the schedule names excludes are still listed (the page has no calendar).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from tjobs.model import Task, TaskStatus
from tjobs.schedules.parsing import schedule_of
from tjobs.specs import CronSpec


@dataclass(frozen=True, slots=True)
class Instant:
    at_ms: int
    utc: str  # 2026-03-29 01:30:00 UTC
    local: str | None  # the same instant in the schedule's zone (cron schedules not in UTC), with its offset


def next_instants(task: Task, count: int = 10) -> list[Instant]:
    """The next ``count`` instants the task will fire at, from its stored next run (none once completed)."""
    if task.status is TaskStatus.COMPLETED or task.next_run_at_ms is None:
        return []
    schedule = schedule_of(task.schedule, task.id)  # jittered as the task fires (a calendar is not applied here)
    limit = count
    if schedule.max_fires is not None:
        limit = min(count, max(schedule.max_fires - task.fire_count, 0))
    found: list[int] = []
    instant: int | None = task.next_run_at_ms
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
