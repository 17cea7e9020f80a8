"""The SQL store: SQLAlchemy Core over MariaDB/MySQL (asyncmy) or SQLite files (aiosqlite).

:class:`SQLAlchemyTaskStore` is composed of one part per role of :mod:`tjobs.stores.contracts`, each in
the package :mod:`tjobs.stores.sql` (its docstring lists them). :mod:`tjobs.stores.sql_layout` maps
shards to engines and tables and :mod:`tjobs.stores.schema` defines the tables. On MariaDB the API's
inserts and reads by id or key, the fire transaction (one per server) and the deliverer's outcome
writes run on raw asyncmy pools (:mod:`tjobs.stores.sql_direct`), not through the engine. Every other
call runs in one transaction per logical database. A database that cannot be reached raises
:class:`tjobs.errors.StorageUnavailable` naming its URL without the password
(:mod:`tjobs.stores.sql.errors`, the one place driver errors are mapped).
"""

from __future__ import annotations

from tjobs.stores.base import TaskStore
from tjobs.stores.sql.accounts import SqlAccounts
from tjobs.stores.sql.creates import SqlCreates
from tjobs.stores.sql.fire_path import SqlFirePath
from tjobs.stores.sql.hot_changes import SqlHotChanges
from tjobs.stores.sql.runs import SqlRunRecords
from tjobs.stores.sql.service_levels import SqlServiceLevels
from tjobs.stores.sql.shard_admin import SqlShardAdmin
from tjobs.stores.sql.tasks import SqlTaskRecords
from tjobs.stores.sql.tenants import SqlTenants

__all__ = ["SQLAlchemyTaskStore"]


class SQLAlchemyTaskStore(
    SqlFirePath,
    SqlCreates,
    SqlTaskRecords,
    SqlTenants,
    SqlServiceLevels,
    SqlShardAdmin,
    SqlHotChanges,
    SqlAccounts,
    SqlRunRecords,
    TaskStore,
):
    """Every role of :class:`TaskStore` on SQL: its parts share the engines and pools of
    :class:`tjobs.stores.sql.connections.SqlBase`, opened by :meth:`start`."""
