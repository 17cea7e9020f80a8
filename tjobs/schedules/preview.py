"""The next instants of a schedule, as the fire path will produce them: a pure function of ``now``.

The instants come from the same :class:`~tjobs.schedules.base.Schedule` the fire path uses
(:func:`~tjobs.schedules.parsing.schedule_of`): the first is where a task registered at ``now_ms`` starts
(``first_fire``, as :meth:`tjobs.service.tasks.TaskService.build` computes it), each next one is
``next_fire`` of the previous (as the fire planner advances a task on time). So a cron's DST
policies, an interval's anchor and the bounds apply exactly as they will when the task fires.
``max_fires`` counts from a task that has not fired yet. Each instant carries the UTC offset of the
schedule's zone at that instant (UTC for every kind but cron). A schedule with ``jitter_ms`` lists its
nominal instants, each with the instant it fires at (:mod:`tjobs.schedules.jitter`) for the task whose id
is the ``seed``. A schedule naming a calendar skips the instants the calendar's rules (as given)
exclude. :func:`instants_in` lists a past range's instants the same way, for a backfill. A
``fixed_delay`` schedule shows only its first run and a ``note``: each later one is ``delay_ms`` after
the previous run ends (:mod:`tjobs.schedules.fixed_delay`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tjobs.schedules.jitter import JitteredSchedule
from tjobs.schedules.parsing import schedule_of, schedule_zone
from tjobs.schedules.zones import zone_timeline
from tjobs.specs import FixedDelaySpec, ScheduleSpec
from tjobs.specs.calendar import CalendarRules

FIXED_DELAY_NOTE = "each later run starts {delay_ms} ms after the previous run ends"
MAX_SKIPPED = 10_000  # instants before ``from_ms`` walked to count them against ``max_fires``


class TooFarAhead(ValueError):
    """``from_ms`` lies more than :data:`MAX_SKIPPED` occurrences after the first of a schedule with
    ``max_fires``: counting the fires before it would cost too much."""


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One upcoming nominal fire instant (UTC epoch ms), the schedule zone's UTC offset at it, and
    with jitter the instant it fires at."""

    at_ms: int
    utc_offset_ms: int
    fires_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Preview:
    """``occurrences`` in increasing order; ``ended`` is true when the schedule has no more after them."""

    timezone: str
    occurrences: list[Occurrence]
    ended: bool
    note: str | None = None  # what the instants cannot show (a fixed_delay's later ones)


def preview(
    spec: ScheduleSpec,
    *,
    now_ms: int,
    count: int,
    from_ms: int | None = None,
    seed: int = 0,
    calendar: CalendarRules | None = None,
) -> Preview:
    """The first ``count`` fire instants of ``spec`` for a task registered at ``now_ms``; with
    ``from_ms``, only those at or after it (the task's fires before it are counted for ``max_fires``);
    without those ``calendar`` (the rules of the calendar the spec names) excludes; jittered for the
    task whose id is ``seed``."""
    if count < 1:
        raise ValueError(f"count must be positive, got {count}")
    if type(spec) is FixedDelaySpec:  # only the first run is known: each later one follows a run's end
        first = spec.start_at_ms
        shown = [] if from_ms is not None and first < from_ms else [Occurrence(first, 0)]
        return Preview("UTC", shown, False, FIXED_DELAY_NOTE.format(delay_ms=spec.delay_ms))
    schedule = schedule_of(spec, calendar=calendar)
    jittered = schedule_of(spec, seed, calendar)
    timeline = zone_timeline(schedule_zone(spec))
    remaining = spec.max_fires  # fires left before the planner completes the task
    instant = schedule.first_fire(now_ms)
    if from_ms is not None and instant is not None and instant < from_ms:
        if remaining is None:
            instant = schedule.next_fire(from_ms - 1)
        else:  # the fires before from_ms count against max_fires: walk them
            skipped = 0
            while instant is not None and instant < from_ms and remaining > 0:
                if skipped == MAX_SKIPPED:
                    raise TooFarAhead(f"more than {MAX_SKIPPED} occurrences lie before it")
                skipped += 1
                remaining -= 1
                instant = schedule.next_fire(instant)
    found: list[Occurrence] = []
    while instant is not None and len(found) < count and (remaining is None or remaining > 0):
        fires_at = jittered.jittered(instant) if isinstance(jittered, JitteredSchedule) else None
        found.append(Occurrence(instant, timeline.offset_ms(instant), fires_at))
        if remaining is not None:
            remaining -= 1
        instant = schedule.next_fire(instant)
    ended = instant is None or remaining == 0
    return Preview(schedule_zone(spec), found, ended)


def instants_in(
    spec: ScheduleSpec,
    from_ms: int,
    to_ms: int,
    limit: int,
    *,
    after_ms: int | None = None,
    calendar: CalendarRules | None = None,
) -> list[int]:
    """The nominal instants of ``spec`` in ``[from_ms, to_ms)`` (strictly after ``after_ms``, where a
    walk of them goes on), oldest first, at most ``limit``: the schedule the preview reads, with its
    bounds and without those ``calendar`` excludes. Jitter moves when an instant fires, not which
    instants there are (a flow is keyed by its nominal instant); ``max_fires`` is the caller's to
    count (:mod:`tjobs.service.backfill`)."""
    start = from_ms - 1 if after_ms is None else max(after_ms, from_ms - 1)
    if limit < 1 or start >= to_ms - 1:
        return []
    return schedule_of(spec, calendar=calendar).occurrences_between(start, to_ms - 1, limit)
