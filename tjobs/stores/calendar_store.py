"""Which :class:`tjobs.stores.contracts.calendars.CalendarRecords` a store has: the SQL store's table
over its own engines, or, for the memory twin (and any other store), a dict of its own."""

from __future__ import annotations

from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.calendars import CalendarRecords
from tjobs.stores.memory_calendars import MemoryCalendars


def calendars_of(store: TaskStore) -> CalendarRecords:
    """The calendars living in ``store``'s databases (make one per store: the memory twin's is held by
    the object returned)."""
    from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

    if isinstance(store, SQLAlchemyTaskStore):
        from tjobs.stores.sql.calendars import SqlCalendars

        return SqlCalendars(store)
    return MemoryCalendars()
