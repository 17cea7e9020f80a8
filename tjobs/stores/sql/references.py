"""Which tasks name which target (``task_targets_TT``): written always in the task's own transaction,
so :meth:`tjobs.stores.contracts.Tenants.count_target_references` reads references, never tasks. The
insert is the one of :mod:`tjobs.stores.sql_direct`, one row per execution on an engine connection."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, delete
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import Task
from tjobs.stores.sql_direct import REFERENCE_ROW, for_driver, reference_insert_head, reference_values
from tjobs.stores.sql_layout import ShardTables


async def insert_references(conn: AsyncConnection, home: ShardTables, tasks: Sequence[Task]) -> None:
    rows = reference_values(tasks)
    if rows:
        await conn.exec_driver_sql(for_driver(conn, reference_insert_head(home.task_targets_sql) + REFERENCE_ROW), rows)


async def delete_references(conn: AsyncConnection, home: ShardTables, task_ids: list[int]) -> None:
    r = home.task_targets.c
    await conn.execute(
        delete(home.task_targets).where(r.task_id.in_(bindparam("task_ids", expanding=True))),
        {"task_ids": task_ids},
        execution_options=home.options,
    )


async def replace_references(conn: AsyncConnection, home: ShardTables, task: Task) -> None:
    await delete_references(conn, home, [task.id])
    await insert_references(conn, home, [task])
