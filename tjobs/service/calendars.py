"""``/v1/calendars``: an app's named calendars, and the copy of every calendar the fire path reads.

A request is ``{"dates", "ranges", "weekdays", "annual", "periods"}`` (:mod:`tjobs.specs.calendar`, each
optional) and/or ``"ical"``: an iCalendar text whose VEVENTs are added to them
(:mod:`tjobs.schedules.ical`; ``"timezone"``, default UTC, reads its UTC date-times as wall time). A
write replaces the calendar's rules whole and moves its version.

The fire planner asks :meth:`CalendarService.rules` inside the fire transaction, so it is answered from
memory: every calendar of every app, read again every ``refresh_s`` (``scheduler.calendar_refresh_s``,
default :data:`REFRESH_S`; a change made on another node is seen within that) and at once after a write
on this node. A write on this node made while a read is in
flight is kept over that read's older rows (unless they carry a higher version). A schedule naming a
calendar the node does not know fires as if it named none (a calendar deleted while tasks still name it).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from tjobs.clock import Clock
from tjobs.errors import InvalidInput, NotFound
from tjobs.periodic import PeriodicPass
from tjobs.schedules.calendars import parse_calendar_rules
from tjobs.schedules.ical import parse_ical
from tjobs.schedules.zones import is_known_zone
from tjobs.specs.calendar import CALENDAR_NAME_PATTERN, Calendar, CalendarRules
from tjobs.stores.contracts.calendars import CalendarRecords

logger = logging.getLogger(__name__)

REFRESH_S = 5.0
MAX_CALENDARS_PER_APP = 100
_BODY_KEYS = frozenset({"dates", "ranges", "weekdays", "annual", "periods", "ical", "timezone"})
_NAME = re.compile(CALENDAR_NAME_PATTERN)


def check_calendar_name(name: Any, field: str) -> str:
    """A calendar name (letters, digits, ``._-``, 1..64), else :class:`InvalidInput` naming ``field``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(field, "must be 1..64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def parse_calendar_request(body: Any) -> CalendarRules:
    """The rules of a calendar write's body; :class:`InvalidInput` naming the field otherwise."""
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object", "invalid_type")
    unknown = sorted(str(key) for key in body if key not in _BODY_KEYS)
    if unknown:
        raise InvalidInput(unknown[0], "unknown field", "unknown_field")
    rules = parse_calendar_rules(body)
    zone = body.get("timezone", "UTC")
    if not isinstance(zone, str) or not is_known_zone(zone):
        raise InvalidInput("timezone", f"{zone!r} is not an IANA time zone", "unknown_timezone")
    ical = body.get("ical")
    if ical is not None:
        if not isinstance(ical, str):
            raise InvalidInput("ical", "must be an iCalendar text", "invalid_type")
        rules = rules.merged(parse_ical(ical, "ical", zone))
    return rules


class CalendarService(PeriodicPass):
    name = "calendar_refresh"

    def __init__(self, records: CalendarRecords, clock: Clock, refresh_s: float = REFRESH_S) -> None:
        super().__init__(refresh_s)
        self._records = records
        self._clock = clock
        self._known: dict[tuple[str, str], Calendar] = {}
        # per read in flight: this node's writes made since it began (None: deleted)
        self._in_flight: list[dict[tuple[str, str], Calendar | None]] = []

    @property
    def refresh_s(self) -> float:
        """How often this node reads every calendar again: a write through another node applies here within it."""
        return self._interval_s

    # ---- the fire path's lookup ------------------------------------------------------------------

    def rules(self, app_id: str, name: str) -> CalendarRules | None:
        """The app's calendar ``name`` as this node last read it (``None``: not known)."""
        calendar = self._known.get((app_id, name))
        return None if calendar is None else calendar.rules

    def known(self, app_id: str, name: str) -> bool:
        return (app_id, name) in self._known

    async def start(self) -> None:
        await self.run_once()
        await super().start()

    async def run_once(self) -> int:
        written: dict[tuple[str, str], Calendar | None] = {}
        self._in_flight.append(written)
        try:
            every = await self._records.list_calendars()
        finally:
            self._in_flight.remove(written)
        known = {(c.app_id, c.name): c for c in every}
        # the read may predate a write made here meanwhile: that write stands until the next read
        for key, calendar in written.items():
            read = known.get(key)
            if calendar is None:
                known.pop(key, None)
            elif read is None or read.version <= calendar.version:
                known[key] = calendar
        self._known = known
        return len(known)

    def _wrote(self, key: tuple[str, str], calendar: Calendar | None) -> None:
        if calendar is None:
            self._known.pop(key, None)
        else:
            self._known[key] = calendar
        for written in self._in_flight:
            written[key] = calendar

    # ---- the API ---------------------------------------------------------------------------------

    async def put(self, app_id: str, name: str, body: Any) -> tuple[Calendar, bool]:
        """Create or replace the app's calendar ``name``; the calendar and whether it is new."""
        check_calendar_name(name, "name")
        rules = parse_calendar_request(body)
        existing = await self._records.get_calendar(app_id, name)
        if existing is None and len(await self._records.list_calendars(app_id)) >= MAX_CALENDARS_PER_APP:
            raise InvalidInput("name", f"the app has {MAX_CALENDARS_PER_APP} calendars already", "too_many")
        stored = await self._records.put_calendar(app_id, name, rules, self._clock.now_ms())
        self._wrote((app_id, name), stored)
        logger.info(
            "calendar %s of app %s written (version %d)",
            name,
            app_id,
            stored.version,
            extra={"action": "calendar_written", "app_id": app_id},
        )
        return stored, existing is None

    async def get(self, app_id: str, name: str) -> Calendar:
        calendar = await self._records.get_calendar(app_id, name)
        if calendar is None:
            raise NotFound("calendar", name)
        return calendar

    async def list(self, app_id: str) -> list[Calendar]:
        return await self._records.list_calendars(app_id)

    async def delete(self, app_id: str, name: str) -> None:
        if not await self._records.delete_calendar(app_id, name):
            raise NotFound("calendar", name)
        self._wrote((app_id, name), None)
