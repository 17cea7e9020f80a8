"""Which :class:`tjobs.stores.contracts.alerts.AlertSettings` a store has: the SQL store's tables over
its own engines, or, for the memory twin (and any other store), dicts of their own."""

from __future__ import annotations

from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.alerts import AlertSettings
from tjobs.stores.memory_alerts import MemoryAlertSettings


def alert_settings_of(store: TaskStore) -> AlertSettings:
    """The alert settings living in ``store``'s databases (make one per store: the memory twin's
    is held by the object returned)."""
    from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

    if isinstance(store, SQLAlchemyTaskStore):
        from tjobs.stores.sql.alerts import SqlAlertSettings

        return SqlAlertSettings(store)
    return MemoryAlertSettings()
