"""iCalendar import (RFC 5545, the part a holiday calendar uses): each VEVENT becomes an exclusion.

- all-day (``DTSTART;VALUE=DATE:20261225``, ``DTEND`` exclusive, default one day): its dates;
- timed (``DTSTART:20261231T180000``, floating or ``TZID=...``: read as wall time; with ``Z``: UTC,
  turned into wall time in ``zone``, the zone of the schedules using it): a period ``[DTSTART, DTEND)``
  (``DTEND`` default: ``DTSTART``, an empty period);
- ``RRULE`` only when simple: ``FREQ=YEARLY`` on a one-day all-day event (every year on that month-day),
  ``FREQ=WEEKLY;BYDAY=SA,SU`` on an all-day event (those weekdays; without ``BYDAY``, DTSTART's). ``UNTIL``,
  ``COUNT``, ``INTERVAL`` other than 1, ``EXDATE`` and every other rule are refused, naming the line.

Folded lines (a continuation starts with a space or a tab) are unfolded first. Anything else outside
VEVENTs (VTIMEZONE, VALARM, properties) is ignored. Errors are :class:`InvalidInput` naming ``field``
with the line number.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from tjobs.errors import InvalidInput
from tjobs.specs.calendar import CalendarRules

MAX_ICAL_CHARS = 1_000_000
MAX_EVENT_DAYS = 3_660  # an all-day event spans at most ten years
_BYDAY = {"MO": 1, "TU": 2, "WE": 3, "TH": 4, "FR": 5, "SA": 6, "SU": 7}


def parse_ical(text: str, field: str, zone: str = "UTC") -> CalendarRules:
    """The exclusions of an iCalendar text (see the module docs)."""
    if len(text) > MAX_ICAL_CHARS:
        raise InvalidInput(field, f"is more than {MAX_ICAL_CHARS} characters", "out_of_range")
    lines = _unfolded(text)
    if not lines or lines[0][1].strip().upper() != "BEGIN:VCALENDAR":
        raise InvalidInput(field, "is not an iCalendar text (BEGIN:VCALENDAR first)", "invalid_ical")
    rules = CalendarRules()
    event: dict[str, tuple[int, str, dict[str, str]]] | None = None
    for number, line in lines:
        name, params, value = _property(line, number, field)
        if name == "BEGIN" and value.upper() == "VEVENT":
            event = {}
        elif name == "END" and value.upper() == "VEVENT":
            if event is None:
                raise InvalidInput(field, f"line {number}: END:VEVENT without BEGIN:VEVENT", "invalid_ical")
            rules = rules.merged(_event_rules(event, number, field, zone))
            event = None
        elif event is not None and name in ("DTSTART", "DTEND", "RRULE"):
            event[name] = (number, value, params)
    if event is not None:
        raise InvalidInput(field, "a VEVENT is not ended (END:VEVENT)", "invalid_ical")
    return rules


def _unfolded(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        if line[:1] in (" ", "\t") and lines:
            lines[-1] = (lines[-1][0], lines[-1][1] + line[1:])
        elif line.strip():
            lines.append((number, line))
    return lines


def _property(line: str, number: int, field: str) -> tuple[str, dict[str, str], str]:
    head, colon, value = line.partition(":")
    if not colon:
        raise InvalidInput(field, f"line {number}: no ':' in {line[:60]!r}", "invalid_ical")
    name, *raw_params = head.split(";")
    params = {}
    for raw in raw_params:
        key, _, param = raw.partition("=")
        params[key.strip().upper()] = param.strip().strip('"')
    return name.strip().upper(), params, value.strip()


def _event_rules(
    event: dict[str, tuple[int, str, dict[str, str]]], end_line: int, field: str, zone: str
) -> CalendarRules:
    if "DTSTART" not in event:
        raise InvalidInput(field, f"line {end_line}: a VEVENT without DTSTART", "invalid_ical")
    start_line, start_text, start_params = event["DTSTART"]
    all_day = start_params.get("VALUE", "").upper() == "DATE" or len(start_text) == 8
    if all_day:
        start = _day(start_text, start_line, field)
        end = _day(event["DTEND"][1], event["DTEND"][0], field) if "DTEND" in event else start + timedelta(days=1)
        days = (end - start).days
        if not 1 <= days <= MAX_EVENT_DAYS:
            raise InvalidInput(
                field, f"line {start_line}: DTEND must be 1..{MAX_EVENT_DAYS} days after DTSTART", "invalid_ical"
            )
        if "RRULE" in event:
            return _recurring(event["RRULE"], start, days, field)
        if days == 1:
            return CalendarRules(dates=(start.isoformat(),))
        return CalendarRules(ranges=((start.isoformat(), (end - timedelta(days=1)).isoformat()),))
    if "RRULE" in event:
        raise InvalidInput(
            field, f"line {event['RRULE'][0]}: RRULE is taken on all-day events only", "unsupported_ical"
        )
    begin = _wall(start_text, start_params, start_line, field, zone)
    finish = begin
    if "DTEND" in event:
        end_line, end_text, end_params = event["DTEND"]
        finish = _wall(end_text, end_params, end_line, field, zone)
    if finish < begin:
        raise InvalidInput(field, f"line {start_line}: DTEND is before DTSTART", "invalid_ical")
    return CalendarRules(periods=((begin.isoformat(timespec="seconds"), finish.isoformat(timespec="seconds")),))


def _recurring(rrule: tuple[int, str, dict[str, str]], start: date, days: int, field: str) -> CalendarRules:
    number, text, _ = rrule
    parts = dict(part.partition("=")[::2] for part in text.upper().split(";") if part)
    freq = parts.pop("FREQ", None)
    if parts.pop("INTERVAL", "1") != "1" or parts.keys() - {"BYDAY", "WKST"} or days != 1:
        raise InvalidInput(
            field, f"line {number}: RRULE {text!r} is not a simple yearly or weekly rule", "unsupported_ical"
        )
    if freq == "YEARLY" and "BYDAY" not in parts:
        return CalendarRules(annual=(f"{start.month:02d}-{start.day:02d}",))
    if freq == "WEEKLY":
        names = parts.get("BYDAY", "").split(",") if parts.get("BYDAY") else []
        if any(name not in _BYDAY for name in names):
            raise InvalidInput(
                field, f"line {number}: BYDAY {parts['BYDAY']!r} is not a list of weekdays", "unsupported_ical"
            )
        weekdays = sorted({_BYDAY[name] for name in names} or {start.isoweekday()})
        return CalendarRules(weekdays=tuple(weekdays))
    raise InvalidInput(
        field, f"line {number}: RRULE {text!r} is not a simple yearly or weekly rule", "unsupported_ical"
    )


def _day(text: str, number: int, field: str) -> date:
    try:
        if len(text) != 8 or not text.isdigit():
            raise ValueError(text)
        return datetime.strptime(text, "%Y%m%d").date()
    except ValueError:
        raise InvalidInput(field, f"line {number}: {text!r} is not a date (YYYYMMDD)", "invalid_ical") from None


def _wall(text: str, params: dict[str, str], number: int, field: str, zone: str) -> datetime:
    utc = text.endswith("Z")
    try:
        digits = text.removesuffix("Z")
        if len(digits) != 15 or not digits.replace("T", "", 1).isdigit():
            raise ValueError(text)
        moment = datetime.strptime(digits, "%Y%m%dT%H%M%S")
    except ValueError:
        raise InvalidInput(
            field, f"line {number}: {text!r} is not a date-time (YYYYMMDDTHHMMSS)", "invalid_ical"
        ) from None
    if utc:
        return moment.replace(tzinfo=UTC).astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    return moment  # floating, or in its TZID: read as the wall time of the schedules using the calendar
