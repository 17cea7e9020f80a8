"""The memory twin's calendars (:class:`tjobs.stores.contracts.calendars.CalendarRecords`): a dict keyed
as the SQL table is."""

from __future__ import annotations

from dataclasses import replace

from tjobs.specs.calendar import Calendar, CalendarRules
from tjobs.stores.contracts.calendars import CalendarRecords


class MemoryCalendars(CalendarRecords):
    def __init__(self) -> None:
        self._calendars: dict[tuple[str, str], Calendar] = {}

    async def put_calendar(self, app_id: str, name: str, rules: CalendarRules, now_ms: int) -> Calendar:
        old = self._calendars.get((app_id, name))
        if old is None:
            stored = Calendar(app_id, name, rules, 1, now_ms, now_ms)
        else:
            stored = replace(old, rules=rules, version=old.version + 1, updated_at_ms=now_ms)
        self._calendars[(app_id, name)] = stored
        return stored

    async def get_calendar(self, app_id: str, name: str) -> Calendar | None:
        return self._calendars.get((app_id, name))

    async def list_calendars(self, app_id: str | None = None) -> list[Calendar]:
        return [calendar for key, calendar in sorted(self._calendars.items()) if app_id is None or key[0] == app_id]

    async def delete_calendar(self, app_id: str, name: str) -> bool:
        return self._calendars.pop((app_id, name), None) is not None
