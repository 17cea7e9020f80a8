"""The base of the SQL store's roles kept in the apps database (alert settings, calendars, the audit log):
they hold the :class:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore` they are given (no pool of their own)
and reach the first logical database through its engine URL and options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


class AppsDatabaseRecords:
    """Holds the store; ``_url`` and ``_options`` name the apps database for ``_store._write``/``_read``."""

    def __init__(self, store: SQLAlchemyTaskStore) -> None:
        self._store = store

    @property
    def _url(self) -> str:
        return self._store.layout.apps_database.engine_url

    @property
    def _options(self) -> dict[str, Any]:
        return self._store.layout.apps_options
