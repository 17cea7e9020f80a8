"""Calendars: an app's named exclusion rules (:mod:`tjobs.specs.calendar`), beside the apps in the
first logical database.

Each write moves the calendar's ``version`` (1 when created), so a cache keyed by app, name and
version never serves stale rules as current; a delete forgets it (a name written again starts at 1
with a new ``created_at_ms``; caches also compare the rules, which are values). The store keeps the
rules as JSON and never reads inside them beyond :func:`tjobs.specs.calendar.calendar_rules_from_json`.

The role stands beside :class:`tjobs.stores.base.TaskStore`, over the same databases:
:func:`tjobs.stores.calendar_store.calendars_of` gives a store's (the SQL store's shares its engines;
the memory twin's is a dict of its own).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from tjobs.specs.calendar import Calendar, CalendarRules


class CalendarRecords(ABC):
    @abstractmethod
    async def put_calendar(self, app_id: str, name: str, rules: CalendarRules, now_ms: int) -> Calendar:
        """Create the app's calendar ``name`` (version 1) or replace its rules (version + 1); the
        calendar as stored."""

    @abstractmethod
    async def get_calendar(self, app_id: str, name: str) -> Calendar | None:
        """The app's calendar ``name``, or ``None``."""

    @abstractmethod
    async def list_calendars(self, app_id: str | None = None) -> list[Calendar]:
        """The app's calendars (every app's with ``None``), by app then name."""

    @abstractmethod
    async def delete_calendar(self, app_id: str, name: str) -> bool:
        """Forget the app's calendar ``name``; whether there was one."""
