"""IANA time zones as a timeline of UTC-offset transitions, for the cron DST layer.

:mod:`zoneinfo` answers "what is the offset at this instant" but does not list transitions. The cron
layer needs them (where a gap or an overlap starts and how far the clock jumps), so a
:class:`ZoneTimeline` finds them per UTC year by sampling the offset every few hours and bisecting each
change to the second, then caches the year. Since 1970 no zone changes its offset twice within a week,
so a 12-hour step cannot miss one. A zone-year is scanned once per process; a zone without changes
then costs one empty tuple per year.

All instants and offsets are integer milliseconds (offsets are whole seconds, so ``wall = utc + offset``
is exact).
"""

from __future__ import annotations

import zoneinfo
from bisect import bisect_right
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache

MS_PER_DAY = 86_400_000
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_SAMPLE_STEP_S = 12 * 3600
_MAX_CACHED_YEARS = 512  # per zone; the fire path only ever touches a handful


@dataclass(frozen=True, slots=True)
class Transition:
    """At ``at_ms`` the zone's offset changes from ``before_ms`` to ``after_ms``.

    ``after_ms > before_ms`` opens a gap: local wall times in ``[at + before, at + after)`` do not
    exist. ``after_ms < before_ms`` makes an overlap: wall times in ``[at + after, at + before)``
    occur twice, first before ``at`` and again after it.
    """

    at_ms: int
    before_ms: int
    after_ms: int


def year_of(instant_ms: int) -> int:
    return date.fromordinal(EPOCH_ORDINAL + instant_ms // MS_PER_DAY).year


def year_start_ms(year: int) -> int:
    return (date(year, 1, 1).toordinal() - EPOCH_ORDINAL) * MS_PER_DAY


@lru_cache(maxsize=1)
def _known_keys() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones() - {"localtime"})


def is_known_zone(key: str) -> bool:
    """True for a canonical IANA key (``Asia/Shanghai``, ``UTC``); never for host-dependent ``localtime``."""
    return key in _known_keys()


@lru_cache(maxsize=1024)
def zone_timeline(key: str) -> ZoneTimeline:
    """The shared timeline of ``key``; raises ``KeyError`` for a key :func:`is_known_zone` rejects."""
    if not is_known_zone(key):
        raise KeyError(key)
    return ZoneTimeline(zoneinfo.ZoneInfo(key))


class ZoneTimeline:
    def __init__(self, zone: zoneinfo.ZoneInfo) -> None:
        self.zone = zone
        self._years: dict[int, tuple[tuple[int, ...], tuple[Transition, ...]]] = {}

    def offset_ms(self, instant_ms: int) -> int:
        """The UTC offset in force at ``instant_ms`` (a transition instant already has the new one)."""
        offset = datetime.fromtimestamp(instant_ms // 1000, self.zone).utcoffset()
        assert offset is not None
        return (offset.days * 86_400 + offset.seconds) * 1000

    def next_transition(self, after_ms: int, until_ms: int) -> Transition | None:
        """The first transition with ``after_ms < at_ms <= until_ms``, if any."""
        year = year_of(after_ms)
        while year_start_ms(year) <= until_ms:
            instants, transitions = self._year(year)
            i = bisect_right(instants, after_ms)
            if i < len(instants):
                found = transitions[i]
                return found if found.at_ms <= until_ms else None
            year += 1
        return None

    def last_transition(self, at_or_before_ms: int) -> Transition | None:
        """The latest transition with ``at_ms <= at_or_before_ms`` in this or the previous UTC year."""
        year = year_of(at_or_before_ms)
        for candidate_year in (year, year - 1):
            instants, transitions = self._year(candidate_year)
            i = bisect_right(instants, at_or_before_ms)
            if i > 0:
                return transitions[i - 1]
        return None

    def _year(self, year: int) -> tuple[tuple[int, ...], tuple[Transition, ...]]:
        cached = self._years.get(year)
        if cached is None:
            if len(self._years) >= _MAX_CACHED_YEARS:
                self._years.clear()
            transitions = self._scan(year_start_ms(year) // 1000, year_start_ms(year + 1) // 1000)
            cached = (tuple(t.at_ms for t in transitions), transitions)
            self._years[year] = cached
        return cached

    def _scan(self, start_s: int, end_s: int) -> tuple[Transition, ...]:
        """Transitions with ``start_s < at <= end_s`` (seconds), found by sampling and bisection."""
        found: list[Transition] = []
        prev_s, prev_off = start_s, self.offset_ms(start_s * 1000)
        while prev_s < end_s:
            next_s = min(prev_s + _SAMPLE_STEP_S, end_s)
            next_off = self.offset_ms(next_s * 1000)
            if next_off != prev_off:
                lo, hi = prev_s, next_s  # offset(lo) == prev_off, offset(hi) != prev_off
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if self.offset_ms(mid * 1000) == prev_off:
                        lo = mid
                    else:
                        hi = mid
                found.append(Transition(hi * 1000, prev_off, self.offset_ms(hi * 1000)))
            prev_s, prev_off = next_s, next_off
        return tuple(found)


__all__ = ["Transition", "ZoneTimeline", "is_known_zone", "year_of", "year_start_ms", "zone_timeline"]
