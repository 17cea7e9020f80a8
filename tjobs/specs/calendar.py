"""A calendar's exclusion rules as a typed value, and the JSON the store keeps.

An app names calendars (``/v1/calendars``); a recurring schedule references one by name
(``"calendar": "holidays"``) to skip the instants it excludes, read as wall time in the schedule's zone
(:mod:`tjobs.schedules.calendars`)::

    {"dates": ["2026-12-25"],                                   # local dates
     "ranges": [{"from": "2026-12-24", "to": "2027-01-01"}],    # local dates, both inclusive
     "weekdays": ["sat", "sun"],
     "annual": ["01-01", "12-25"],                              # month-day, every year
     "periods": [{"from": "2026-12-31T18:00:00", "to": "2027-01-01T06:00:00"}]}  # local wall time, [from, to)

Every list is optional and kept sorted and without repeats, so equal rules are equal values (the fire
path caches the compiled rules by value).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tjobs.wire import CALENDAR_NAME_PATTERN

__all__ = [
    "CALENDAR_NAME_PATTERN",
    "WEEKDAYS",
    "Calendar",
    "CalendarLookup",
    "CalendarRules",
    "calendar_rules_from_json",
    "calendar_rules_to_json",
]

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # ISO order: mon is 1


@dataclass(frozen=True, slots=True)
class CalendarRules:
    dates: tuple[str, ...] = ()  # YYYY-MM-DD
    ranges: tuple[tuple[str, str], ...] = ()  # (from, to) YYYY-MM-DD, inclusive
    weekdays: tuple[int, ...] = ()  # ISO: 1 = Monday .. 7 = Sunday
    annual: tuple[str, ...] = ()  # MM-DD
    periods: tuple[tuple[str, str], ...] = ()  # (from, to) YYYY-MM-DDTHH:MM:SS local wall time, [from, to)

    def merged(self, other: CalendarRules) -> CalendarRules:
        """Both rules' exclusions."""
        return CalendarRules(
            tuple(sorted({*self.dates, *other.dates})),
            tuple(sorted({*self.ranges, *other.ranges})),
            tuple(sorted({*self.weekdays, *other.weekdays})),
            tuple(sorted({*self.annual, *other.annual})),
            tuple(sorted({*self.periods, *other.periods})),
        )


@dataclass(frozen=True, slots=True)
class Calendar:
    """An app's named calendar; ``version`` moves on every change (caches key on it)."""

    app_id: str
    name: str
    rules: CalendarRules
    version: int
    created_at_ms: int
    updated_at_ms: int


CalendarLookup = Callable[[str, str], CalendarRules | None]
"""(app id, calendar name) -> the calendar's rules, from memory; ``None``: not known."""


def calendar_rules_to_json(rules: CalendarRules) -> dict[str, Any]:
    """The stored (and answered) JSON of ``rules``: only the lists that hold something."""
    stored: dict[str, Any] = {}
    if rules.dates:
        stored["dates"] = list(rules.dates)
    if rules.ranges:
        stored["ranges"] = [{"from": start, "to": end} for start, end in rules.ranges]
    if rules.weekdays:
        stored["weekdays"] = [WEEKDAYS[day - 1] for day in rules.weekdays]
    if rules.annual:
        stored["annual"] = list(rules.annual)
    if rules.periods:
        stored["periods"] = [{"from": start, "to": end} for start, end in rules.periods]
    return stored


def calendar_rules_from_json(stored: dict[str, Any]) -> CalendarRules:
    """The rules of a stored JSON object (trusted: it was validated when written)."""
    return CalendarRules(
        tuple(stored.get("dates", ())),
        tuple((r["from"], r["to"]) for r in stored.get("ranges", ())),
        tuple(WEEKDAYS.index(day) + 1 for day in stored.get("weekdays", ())),
        tuple(stored.get("annual", ())),
        tuple((p["from"], p["to"]) for p in stored.get("periods", ())),
    )
