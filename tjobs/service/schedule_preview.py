"""``POST /v1/schedules:preview``: validate a preview request and compute the schedule's next instants.

The body is ``{"schedule": <as in a task create>, "count": 1..100 (10), "from": <ISO-8601 with an
offset, or epoch ms; optional, at most limits.max_future_days ahead>, "task_id": <optional: the task
whose jitter to show, default 0>}``. The schedule is validated
exactly as a create validates it, at the node's ``now`` (same limits, same misfire threshold, same
field-named errors); the instants come from :func:`tjobs.schedules.preview.preview`, the fire path's
own schedule math.
"""

from __future__ import annotations

from typing import Any

from tjobs.errors import InvalidInput, known_object
from tjobs.schedules.instants import parse_iso_instant_ms
from tjobs.schedules.parsing import MS_PER_DAY, parse_schedule_request
from tjobs.schedules.preview import Preview, TooFarAhead, preview
from tjobs.settings import Settings
from tjobs.specs import ScheduleSpec
from tjobs.specs.calendar import CalendarLookup

MAX_COUNT = 100
DEFAULT_COUNT = 10
MAX_INSTANT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last instant ISO-8601 can name
_KEYS = frozenset({"schedule", "count", "from", "task_id"})
MAX_TASK_ID = (1 << 63) - 1


def preview_request(
    body: Any, settings: Settings, now_ms: int, calendars: CalendarLookup | None = None, app_id: str | None = None
) -> tuple[ScheduleSpec, Preview]:
    """The canonical schedule of a preview request and its next instants; :class:`InvalidInput`
    naming the field (``schedule.*``, ``count``, ``from``, ``task_id``) otherwise. A schedule naming a
    calendar skips what the caller app's calendar of that name excludes (``calendars``, from memory;
    an admin, who has no app, or a name the app has not: 422 naming ``schedule.calendar``)."""
    known_object(body, _KEYS)
    if "schedule" not in body:
        raise InvalidInput("schedule", "is required", "missing")
    count = body.get("count", DEFAULT_COUNT)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
        raise InvalidInput("count", f"must be an integer within 1..{MAX_COUNT}", "out_of_range")
    task_id = body.get("task_id", 0)
    if not isinstance(task_id, int) or isinstance(task_id, bool) or not 0 <= task_id <= MAX_TASK_ID:
        raise InvalidInput("task_id", f"must be an integer within 0..{MAX_TASK_ID}", "out_of_range")
    from_ms = parse_instant(body.get("from"), "from")
    if from_ms is not None and from_ms > now_ms + settings.limits.max_future_days * MS_PER_DAY:
        raise InvalidInput("from", f"is more than {settings.limits.max_future_days} days ahead", "too_far")
    threshold_ms = int(settings.scheduler.misfire_threshold_s * 1000)
    spec = parse_schedule_request(
        body["schedule"], now_ms=now_ms, limits=settings.limits, misfire_threshold_ms=threshold_ms
    )
    calendar = None
    name = getattr(spec, "calendar", None)
    if name is not None:
        calendar = None if calendars is None or app_id is None else calendars(app_id, name)
        if calendar is None:
            raise InvalidInput("schedule.calendar", f"the app has no calendar named {name!r}", "unknown_calendar")
    try:
        return spec, preview(spec, now_ms=now_ms, count=count, from_ms=from_ms, seed=task_id, calendar=calendar)
    except TooFarAhead as error:
        raise InvalidInput("from", str(error), "out_of_range") from None


def parse_instant(value: Any, field: str) -> int | None:
    """An instant given as ISO-8601 with a UTC offset or as epoch milliseconds; ``None`` if absent."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        instant_ms = value
    elif isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit() and len(text) <= 19:
            instant_ms = int(text)
        else:
            instant_ms = parse_iso_instant_ms(text, field, expected="an ISO-8601 instant or epoch ms")
    else:
        raise InvalidInput(field, "must be an ISO-8601 string with an offset, or epoch ms", "invalid_type")
    if not 0 <= instant_ms <= MAX_INSTANT_MS:
        raise InvalidInput(field, "is outside 1970-01-01..9999-12-31", "out_of_range")
    return instant_ms
