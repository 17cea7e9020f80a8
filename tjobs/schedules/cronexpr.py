"""Cron expressions, matched against local wall-clock time in whole seconds.

:mod:`cronsim` parses the expression (5 fields, or 6 with **seconds first**; names such as ``MON`` and
``JAN``; ``L``, ``LW``, ``5L`` and ``MON#2``; Debian's rule that day-of-month and day-of-week are
OR-ed unless either starts with ``*``). Matching is done here instead of with cronsim's iterator,
which advances one second, minute or hour at a time through tz-aware datetimes: a
:class:`CronPattern` keeps the fields as sorted tuples, caches the matching days of each month, and
finds the next match with a few bisections.

A *wall second* is a local date and time written as seconds since 1970-01-01 00:00 on that same local
calendar, with no time zone: ``wall = utc + offset``. Mapping wall times to instants (and the DST
policies) is :mod:`tjobs.schedules.cron`'s job.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from datetime import date, datetime
from functools import lru_cache

from cronsim import CronSim, CronSimError

SECONDS_PER_DAY = 86_400
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
MAX_EXPR_CHARS = 200
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_PARSE_ANCHOR = datetime(2000, 1, 1)  # naive: cronsim applies none of its own DST handling
_MAX_CACHED_MONTHS = 4096


class CronSyntaxError(ValueError):
    """The expression cannot be used; ``code`` is ``invalid`` or ``never_fires``."""

    def __init__(self, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.code = code


class CronPattern:
    """A parsed cron expression. Build it with :func:`parse_cron`, which caches instances."""

    __slots__ = (
        "_day_and",
        "_first_sod",
        "_hours",
        "_match_day",
        "_minutes",
        "_month_days",
        "_months",
        "_seconds",
        "expr",
        "has_seconds",
    )

    def __init__(self, expr: str) -> None:
        text = ALIASES.get(expr.strip().lower(), expr)
        fields = text.split()
        if len(fields) not in (5, 6):
            raise CronSyntaxError(f"has {len(fields)} fields; expected 5, or 6 with seconds first")
        sim = _cronsim(text, fields)
        self.expr = expr
        self.has_seconds = len(fields) == 6
        self._seconds = tuple(sorted(sim.seconds))
        self._minutes = tuple(sorted(sim.minutes))
        self._hours = tuple(sorted(sim.hours))
        self._months = frozenset(sim.months)
        self._day_and = sim.day_and
        self._match_day = sim.match_day
        self._first_sod = self._hours[0] * 3600 + self._minutes[0] * 60 + self._seconds[0]
        self._month_days: dict[int, tuple[int, ...]] = {}

    def next_at_or_after(self, wall_s: int, limit_s: int) -> int | None:
        """The first matching wall second ``>= wall_s``, or ``None`` if there is none ``<= limit_s``."""
        day_num, sod = divmod(wall_s, SECONDS_PER_DAY)
        day = date.fromordinal(EPOCH_ORDINAL + day_num)
        year, month, mday = day.year, day.month, day.day
        if month in self._months:
            days = self._days_of(year, month)
            i = bisect_left(days, mday)
            if i < len(days) and days[i] == mday:
                in_day = self._next_sod(sod)
                if in_day is not None:
                    found = wall_s - sod + in_day
                    return found if found <= limit_s else None
                i += 1
            if i < len(days):
                found = (day_num + days[i] - mday) * SECONDS_PER_DAY + self._first_sod
                return found if found <= limit_s else None
        limit_day = date.fromordinal(EPOCH_ORDINAL + limit_s // SECONDS_PER_DAY)
        limit_month = (limit_day.year, limit_day.month)
        while True:
            month += 1
            if month > 12:
                year, month = year + 1, 1
            if (year, month) > limit_month:
                return None
            if month in self._months:
                days = self._days_of(year, month)
                if days:
                    first = date(year, month, days[0]).toordinal() - EPOCH_ORDINAL
                    found = first * SECONDS_PER_DAY + self._first_sod
                    return found if found <= limit_s else None

    def _next_sod(self, sod: int) -> int | None:
        """The first matching second of the day ``>= sod``, or ``None`` if the day has no more."""
        hours, minutes, seconds = self._hours, self._minutes, self._seconds
        hour, rest = divmod(sod, 3600)
        minute, second = divmod(rest, 60)
        i = bisect_left(hours, hour)
        if i == len(hours):
            return None
        if hours[i] == hour:
            j = bisect_left(minutes, minute)
            if j < len(minutes) and minutes[j] == minute:
                k = bisect_left(seconds, second)
                if k < len(seconds):
                    return hour * 3600 + minute * 60 + seconds[k]
                j += 1
            if j < len(minutes):
                return hour * 3600 + minutes[j] * 60 + seconds[0]
            i += 1
            if i == len(hours):
                return None
        return hours[i] * 3600 + minutes[0] * 60 + seconds[0]

    def _days_of(self, year: int, month: int) -> tuple[int, ...]:
        key = year * 12 + month
        days = self._month_days.get(key)
        if days is None:
            if len(self._month_days) >= _MAX_CACHED_MONTHS:
                self._month_days.clear()
            length = calendar.monthrange(year, month)[1]
            match_day = self._match_day
            days = tuple(d for d in range(1, length + 1) if match_day(date(year, month, d)))
            self._month_days[key] = days
        return days


@lru_cache(maxsize=4096)
def parse_cron(expr: str) -> CronPattern:
    """The cached :class:`CronPattern` of ``expr``; raises :class:`CronSyntaxError`."""
    if len(expr) > MAX_EXPR_CHARS:
        raise CronSyntaxError(f"is longer than {MAX_EXPR_CHARS} characters")
    return CronPattern(expr)


def _cronsim(text: str, fields: list[str]) -> CronSim:
    try:
        return CronSim(text, _PARSE_ANCHOR)
    except CronSimError as exc:
        day_field = fields[-3]
        if str(exc) == "Bad day-of-month" and _parses(f"0 0 {day_field} * *"):
            # A well-formed day that no listed month has (``30 2``, ``31 4,6``).
            raise CronSyntaxError("names a day that none of its months has", "never_fires") from None
        raise CronSyntaxError(str(exc).lower() or "is not a cron expression") from None
    except (ValueError, IndexError, KeyError, TypeError) as exc:  # defensive: garbage cronsim did not foresee
        raise CronSyntaxError("is not a cron expression") from exc


def _parses(text: str) -> bool:
    try:
        CronSim(text, _PARSE_ANCHOR)
    except (CronSimError, ValueError, IndexError, KeyError, TypeError):
        return False
    return True
