"""Which :class:`tjobs.stores.contracts.task_parents.TaskParentRecords` a store has: the SQL store's table
over its own engines, or, for the memory twin (and any other store), a set of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.task_parents import TaskParentRecords
from tjobs.stores.memory_task_parents import MemoryTaskParents

if TYPE_CHECKING:
    from tjobs.stores.sql.task_parents import SqlTaskParents


def task_parents_of(store: TaskStore) -> TaskParentRecords:
    """The reverse index of child tasks living in ``store``'s databases (make one per store: the memory
    twin's is held by the object returned)."""
    from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

    if isinstance(store, SQLAlchemyTaskStore):
        from tjobs.stores.sql.task_parents import SqlTaskParents

        return SqlTaskParents(store)
    return MemoryTaskParents()


def sql_task_parents_of(store: TaskStore) -> SqlTaskParents | None:
    """The SQL store's reverse index, which can index the tasks stored before it (``tjobs index-children``);
    ``None`` for the memory twin (it starts empty: nothing to index)."""
    from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

    if isinstance(store, SQLAlchemyTaskStore):
        from tjobs.stores.sql.task_parents import SqlTaskParents

        return SqlTaskParents(store)
    return None
