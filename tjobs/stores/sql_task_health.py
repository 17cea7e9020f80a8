"""The SQL store's task health (:meth:`TaskRecords.task_health`): a page of tasks' newest flow and their
recent flows counted by status, read from the flows' primary key ``(task_id, scheduled_at)``.

Per task two reads, each one range of the primary key from its newest end: the newest flow (``LIMIT 1``)
and, of its flows scheduled since the window's start, the newest ``cap`` grouped by status (``COUNT``
over a ``LIMIT``-ed derived table, so a task firing every second costs ``cap`` index rows, not a day's).
The reads of one server's tasks go in one ``UNION ALL`` statement (:func:`tjobs.stores.sql_search.union_sql`),
a few statements per server at once, every server at once. Nothing is written on the fire path: the
figures are the flows themselves (docs/benchmarks.md, "A flow's answers and the task health", measured
both ways).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Collection
from typing import Any

from sharding import shard_of_task_id
from tjobs.model import FlowStatus, TaskHealth
from tjobs.stores.sql_layout import MYSQL, SQLITE, ShardTables
from tjobs.stores.sql_search import Connect, union_sql

TASKS_PER_STATEMENT = 60  # two reads each: within SQLite's 500 compound parts and a search's 128 per statement
STATEMENTS_PER_SERVER = 4
_NEWEST, _COUNTED = 0, 1


def task_reads(home: ShardTables, task_id: int, since_ms: int, cap: int, dialect: str) -> tuple[list[str], list[Any]]:
    """The two reads of one task and their values: ``(part, task_id, status, scheduled_at, updated_at,
    attempts, n)`` rows, its newest flow (``part`` 0) and its window's statuses counted (``part`` 1)."""
    mark = "?" if dialect == SQLITE else "%s"
    table = f"{home.flows_sql} FORCE INDEX (PRIMARY)" if dialect == MYSQL else home.flows_sql
    newest = (
        f"SELECT {_NEWEST} AS part, task_id, status, scheduled_at, updated_at, attempts, 1 AS n FROM {table} "
        f"WHERE task_id = {mark} ORDER BY scheduled_at DESC LIMIT 1"
    )
    window = (
        f"SELECT task_id, status, scheduled_at FROM {table} WHERE task_id = {mark} AND scheduled_at >= {mark} "
        f"ORDER BY scheduled_at DESC LIMIT {mark}"
    )
    counted = (
        f"SELECT {_COUNTED} AS part, task_id, status, MAX(scheduled_at), NULL, 0, COUNT(*) FROM ({window}) w "
        "GROUP BY task_id, status"
    )
    return [newest, counted], [task_id, task_id, since_ms, cap]


async def task_health(
    shard_tables: Callable[[int], ShardTables],
    connect: Connect,
    task_ids: Collection[int],
    since_ms: int,
    cap: int,
) -> dict[int, TaskHealth]:
    by_server: dict[str, list[int]] = defaultdict(list)
    for task_id in sorted(set(task_ids)):
        by_server[shard_tables(shard_of_task_id(task_id)).database.engine_url].append(task_id)
    rows: list[tuple[Any, ...]] = []

    async def read(url: str, ids: list[int]) -> None:
        async with connect(url) as conn:
            dialect = SQLITE if conn.dialect.name == SQLITE else MYSQL
            parts: list[str] = []
            params: list[Any] = []
            for task_id in ids:
                sql, values = task_reads(shard_tables(shard_of_task_id(task_id)), task_id, since_ms, cap, dialect)
                parts += sql
                params += values
            rows.extend((await conn.exec_driver_sql(union_sql(parts, dialect), tuple(params))).all())

    size = max(1, min(TASKS_PER_STATEMENT, -(-max(map(len, by_server.values()), default=1) // STATEMENTS_PER_SERVER)))
    await asyncio.gather(
        *(read(url, ids[start : start + size]) for url, ids in by_server.items() for start in range(0, len(ids), size))
    )
    return health_of(rows, task_ids)


def health_of(rows: list[tuple[Any, ...]], task_ids: Collection[int]) -> dict[int, TaskHealth]:
    """The rows of :func:`task_reads` folded per task (every asked task present; none of its flows: zeros)."""
    newest: dict[int, tuple[FlowStatus, int, int, int]] = {}
    counts: dict[int, dict[FlowStatus, int]] = defaultdict(dict)
    for part, task_id, status, scheduled_at, updated_at, attempts, n in rows:
        if part == _NEWEST:
            newest[int(task_id)] = (FlowStatus(status), int(scheduled_at), int(updated_at), int(attempts))
        else:
            counts[int(task_id)][FlowStatus(status)] = int(n)
    return {task_id: TaskHealth.of(newest.get(task_id), counts.get(task_id, {})) for task_id in task_ids}
