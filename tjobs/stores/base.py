"""The storage contract: one object holding every role of :mod:`tjobs.stores.contracts`.

Each role's contract is written once, in its own module; :class:`TaskStore` only composes them, so a
node takes one store and a component may name the one role it uses. Every implementation (memory
twin, SQLAlchemy on SQLite or MariaDB) passes the contract suites in ``tests/contract``.
"""

from __future__ import annotations

from tjobs.stores.contracts import (
    EDITABLE_FIELDS,
    Accounts,
    CountCorrection,
    FirePath,
    FirePlanner,
    HotChanges,
    RunRecords,
    ServerSessions,
    ServiceLevels,
    ShardAdmin,
    TaskRecords,
    Tenants,
)

__all__ = ["EDITABLE_FIELDS", "CountCorrection", "FirePlanner", "ServerSessions", "TaskStore"]


class TaskStore(FirePath, TaskRecords, RunRecords, Tenants, ServiceLevels, ShardAdmin, HotChanges, Accounts):
    """Durable storage for one topology of shards: every role at once (see :mod:`tjobs.stores.contracts`).

    Errors: a database that cannot be reached raises :class:`tjobs.errors.StorageUnavailable`, and a
    failed call has written nothing.
    """
