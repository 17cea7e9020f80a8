"""Calendars: which instants a schedule skips, read as wall time in the schedule's zone.

A recurring schedule with ``calendar`` fires only its instants the app's calendar of that name does not
exclude (:mod:`tjobs.specs.calendar` for the rules). :class:`CalendarSchedule` walks the schedule's
own instants and passes over the excluded ones, so a DST gap or repeat is applied first (the instant the
cron's policy chose) and the exclusion is judged on its local date and wall time. The fire planner asks
the app's calendar as it stands at every fire (a changed calendar needs no task rewritten): an instant
found excluded then is recorded by no flow, and the task moves on.

A calendar that excludes more than :data:`MAX_EXCLUDED_RUN` instants in a row does not end its task:
the schedule answers the instant it stopped at, which the planner passes over in turn when it comes.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from tjobs.errors import InvalidInput
from tjobs.model import ScheduleKind
from tjobs.schedules.base import Schedule
from tjobs.specs.calendar import WEEKDAYS, CalendarRules

MAX_EXCLUDED_RUN = 10_000  # consecutive excluded instants walked before answering one anyway
MAX_RULES = 1_000  # entries per list of a calendar
_LISTS = ("dates", "ranges", "weekdays", "annual", "periods")


@dataclass(frozen=True, slots=True)
class Exclusions:
    """Compiled rules: what :meth:`excludes` checks per instant."""

    dates: frozenset[date]
    range_starts: tuple[date, ...]
    range_ends: tuple[date, ...]  # the latest end among the ranges starting at or before each start
    weekdays: frozenset[int]
    annual: frozenset[tuple[int, int]]
    periods: tuple[tuple[datetime, datetime], ...]

    def excludes_local(self, local: datetime) -> bool:
        day = local.date()
        if day in self.dates or day.isoweekday() in self.weekdays or (day.month, day.day) in self.annual:
            return True
        index = bisect_right(self.range_starts, day)
        if index and self.range_ends[index - 1] >= day:
            return True
        wall = local.replace(tzinfo=None, fold=0)
        return any(start <= wall < end for start, end in self.periods)


@lru_cache(maxsize=4096)
def compiled(rules: CalendarRules) -> Exclusions:
    """The compiled form of ``rules`` (cached by value: a calendar's new version compiles once)."""
    ranges = sorted((date.fromisoformat(a), date.fromisoformat(b)) for a, b in rules.ranges)
    ends: list[date] = []
    for _, end in ranges:
        ends.append(max(end, ends[-1]) if ends else end)
    return Exclusions(
        frozenset(date.fromisoformat(d) for d in rules.dates),
        tuple(start for start, _ in ranges),
        tuple(ends),
        frozenset(rules.weekdays),
        frozenset((int(md[:2]), int(md[3:])) for md in rules.annual),
        tuple((datetime.fromisoformat(a), datetime.fromisoformat(b)) for a, b in rules.periods),
    )


def excluded(rules: CalendarRules, zone: str, instant_ms: int) -> bool:
    """Whether ``rules`` exclude ``instant_ms`` as wall time in ``zone``."""
    local = datetime.fromtimestamp(instant_ms / 1000, UTC).astimezone(ZoneInfo(zone))
    return compiled(rules).excludes_local(local)


@dataclass(frozen=True, slots=True)
class CalendarSchedule(Schedule):
    """``base``'s instants that ``rules`` do not exclude in ``zone``."""

    base: Schedule
    rules: CalendarRules
    zone: str
    kind: ScheduleKind = field(init=False)
    max_fires: int | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", self.base.kind)
        object.__setattr__(self, "max_fires", self.base.max_fires)

    def excludes(self, instant_ms: int) -> bool:
        return excluded(self.rules, self.zone, instant_ms)

    def next_fire(self, after_ms: int) -> int | None:
        return self._kept(self.base.next_fire(after_ms))

    def first_fire(self, now_ms: int) -> int | None:
        return self._kept(self.base.first_fire(now_ms))

    def _kept(self, instant: int | None) -> int | None:
        for _ in range(MAX_EXCLUDED_RUN):
            if instant is None or not self.excludes(instant):
                return instant
            instant = self.base.next_fire(instant)
        return instant


# ---- requests ------------------------------------------------------------------------------------


def parse_calendar_rules(body: dict[str, Any]) -> CalendarRules:
    """The rules of a calendar request's lists (``dates``, ``ranges``, ``weekdays``, ``annual``,
    ``periods``; see :mod:`tjobs.specs.calendar`); :class:`InvalidInput` naming the field otherwise."""
    values: dict[str, list[Any]] = {}
    for name in _LISTS:
        value = body.get(name)
        if value is None:
            values[name] = []
            continue
        if not isinstance(value, list):
            raise InvalidInput(name, "must be a list", "invalid_type")
        if len(value) > MAX_RULES:
            raise InvalidInput(name, f"holds more than {MAX_RULES} entries", "out_of_range")
        values[name] = value
    dates = {_date(v, f"dates[{i}]") for i, v in enumerate(values["dates"])}
    ranges = {_span(v, f"ranges[{i}]", _date) for i, v in enumerate(values["ranges"])}
    weekdays = {_weekday(v, f"weekdays[{i}]") for i, v in enumerate(values["weekdays"])}
    annual = {_month_day(v, f"annual[{i}]") for i, v in enumerate(values["annual"])}
    periods = {_span(v, f"periods[{i}]", _wall_time) for i, v in enumerate(values["periods"])}
    return CalendarRules(
        tuple(sorted(dates)),
        tuple(sorted(ranges)),
        tuple(sorted(weekdays)),
        tuple(sorted(annual)),
        tuple(sorted(periods)),
    )


def _date(value: Any, field_name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field_name, "must be a date (YYYY-MM-DD)", "invalid_type")
    try:
        if len(value) != 10:
            raise ValueError(value)
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise InvalidInput(field_name, f"{value!r} is not a date (YYYY-MM-DD)", "invalid_date") from None


def _wall_time(value: Any, field_name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field_name, "must be a local date-time (YYYY-MM-DDTHH:MM:SS)", "invalid_type")
    try:
        parsed = datetime.fromisoformat(value) if value.isascii() and value.isprintable() else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is not None or len(value) < 16:
        raise InvalidInput(
            field_name, f"{value!r} is not a local date-time without an offset (YYYY-MM-DDTHH:MM:SS)", "invalid_date"
        )
    return parsed.isoformat(timespec="seconds")


def _span(value: Any, field_name: str, read: Any) -> tuple[str, str]:
    if not isinstance(value, dict):
        raise InvalidInput(field_name, 'must be {"from": ..., "to": ...}', "invalid_type")
    unknown = sorted(set(value) - {"from", "to"})
    if unknown:
        raise InvalidInput(f"{field_name}.{unknown[0]}", "unknown field", "unknown_field")
    for key in ("from", "to"):
        if key not in value:
            raise InvalidInput(f"{field_name}.{key}", "is required", "missing")
    start, end = read(value["from"], f"{field_name}.from"), read(value["to"], f"{field_name}.to")
    if end < start:
        raise InvalidInput(f"{field_name}.to", "is before from", "out_of_range")
    return start, end


def _weekday(value: Any, field_name: str) -> int:
    if not isinstance(value, str) or value.lower()[:3] not in WEEKDAYS or len(value) < 3:
        raise InvalidInput(field_name, f"must be one of {', '.join(WEEKDAYS)}", "invalid_choice")
    return WEEKDAYS.index(value.lower()[:3]) + 1


def _month_day(value: Any, field_name: str) -> str:
    if isinstance(value, str) and len(value) == 5 and value[2] == "-":
        try:
            date.fromisoformat(f"2000-{value}")  # a leap year: 02-29 is a month-day
            return value
        except ValueError:
            pass
    raise InvalidInput(field_name, f"{value!r} is not a month-day (MM-DD)", "invalid_date")
