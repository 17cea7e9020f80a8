"""Which tasks name which target (``task_targets_TT``): written always in the task's own transaction,
so :meth:`tjobs.stores.contracts.Tenants.count_target_references` reads references, never tasks."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, delete, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import Task
from tjobs.stores.schema import task_target_rows
from tjobs.stores.sql_layout import ShardTables


async def insert_references(conn: AsyncConnection, home: ShardTables, tasks: Sequence[Task]) -> None:
    rows = [row for task in tasks for row in task_target_rows(task)]
    if rows:
        await conn.execute(insert(home.task_targets), rows, execution_options=home.options)


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
