"""Which :class:`tjobs.stores.contracts.operator_jobs.OperatorJobs` a store has: the SQL store's table
over its own engines, or, for the memory twin (and any other store), a dict of its own."""

from __future__ import annotations

from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.operator_jobs import OperatorJobs
from tjobs.stores.memory_operator_jobs import MemoryOperatorJobs


def operator_jobs_of(store: TaskStore) -> OperatorJobs:
    """The operator jobs living in ``store``'s databases (make one per store: the memory twin's is held
    by the object returned)."""
    from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

    if isinstance(store, SQLAlchemyTaskStore):
        from tjobs.stores.sql.operator_jobs import SqlOperatorJobs

        return SqlOperatorJobs(store)
    return MemoryOperatorJobs()
