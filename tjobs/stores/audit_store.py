"""Which :class:`tjobs.stores.contracts.audit.AuditLog` a store has: the SQL store's table over its own
engines, or, for the memory twin (and any other store), a list of its own."""

from __future__ import annotations

from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.audit import AuditLog
from tjobs.stores.memory_audit import MemoryAuditLog


def audit_log_of(store: TaskStore) -> AuditLog:
    """The audit log living in ``store``'s databases (make one per store: the memory twin's is held by
    the object returned)."""
    from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

    if isinstance(store, SQLAlchemyTaskStore):
        from tjobs.stores.sql.audit import SqlAuditLog

        return SqlAuditLog(store)
    return MemoryAuditLog()
