"""The SQL store's searches across shards (:meth:`TaskStore.search_flows`, :meth:`TaskStore.search_tasks`).

Each shard is read as one ordered index range, ``LIMIT`` rows past its position; the shards of one
logical database go in one ``UNION ALL`` statement of those limited reads (each a derived table, whose
``ORDER BY ... LIMIT`` both MariaDB and SQLite keep), and a server runs at most
:data:`STATEMENTS_PER_SERVER` of a search's statements at a time. The indexes that make each read a
range come with migration ``0006_search`` (:func:`tjobs.stores.schema.search_task_indexes`,
:func:`tjobs.stores.schema.search_flow_indexes`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from sqlalchemy import Select, and_, literal_column, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from sharding import shard_of_task_id
from tjobs.model import Flow, Task
from tjobs.stores.queries import (
    FlowPosition,
    FlowQuery,
    TaskPosition,
    TaskQuery,
    flow_rank,
    prefix_upper_bound,
    task_rank,
)
from tjobs.stores.schema import SCHEDULE_KIND_COLUMN, flow_from_row, task_from_row
from tjobs.stores.sql_layout import ShardTables

STATEMENTS_PER_SERVER = 4

Item = TypeVar("Item", Flow, Task)
Position = TypeVar("Position", FlowPosition, TaskPosition)
Connect = Callable[[str], AbstractAsyncContextManager[AsyncConnection]]


def flow_statement(home: ShardTables, query: FlowQuery, after: FlowPosition | None, limit: int) -> Select[Any]:
    """One shard's read: ``(app_id, [status,] scheduled_at, task_id)`` descending, or a task's own
    flows by the primary key ``(task_id, scheduled_at)``."""
    f = home.flows.c
    statement = select(home.flows).where(f.app_id == query.app_id)
    if query.task_id is not None:
        statement = statement.where(f.task_id == query.task_id)
    if query.status is not None:
        statement = statement.where(f.status == query.status.value)
    if query.retrying:
        statement = statement.where(f.attempts >= 1)
    if query.from_ms is not None:
        statement = statement.where(f.scheduled_at >= query.from_ms)
    if query.until_ms is not None:
        statement = statement.where(f.scheduled_at < query.until_ms)
    if after is not None:
        at, task_id = after
        # the redundant bound keeps it one range of the index
        statement = statement.where(
            f.scheduled_at <= at, or_(f.scheduled_at < at, and_(f.scheduled_at == at, f.task_id < task_id))
        )
    return statement.order_by(f.scheduled_at.desc(), f.task_id.desc()).limit(limit)


def task_statement(home: ShardTables, query: TaskQuery, after: TaskPosition | None, limit: int) -> Select[Any]:
    """One shard's read: the app's ``(name, id)`` range of the prefix ascending, or its ids descending
    (through ``(app_id, status, id)``, ``(app_id, schedule_kind, id)`` or ``(app_id, id)``)."""
    t = home.tasks.c
    statement = select(home.tasks).where(t.app_id == query.app_id)
    if query.key is not None:
        statement = statement.where(t.idem_key == query.key)
    if query.status is not None:
        statement = statement.where(t.status == query.status.value)
    if query.kind is not None:
        statement = statement.where(literal_column(SCHEDULE_KIND_COLUMN) == query.kind.value)
    if query.name_prefix is not None:
        statement = statement.where(t.name >= query.name_prefix)
        upper = prefix_upper_bound(query.name_prefix)
        if upper is not None:
            statement = statement.where(t.name < upper)
        if after is not None:
            name, task_id = after
            statement = statement.where(t.name >= name, or_(t.name > name, and_(t.name == name, t.id > task_id)))
        return statement.order_by(t.name, t.id).limit(limit)
    if after is not None:
        statement = statement.where(t.id < after[1])
    return statement.order_by(t.id.desc()).limit(limit)


async def search_flows(
    shard_tables: Callable[[int], ShardTables],
    connect: Connect,
    query: FlowQuery,
    reads: Mapping[int, FlowPosition | None],
    limit: int,
) -> dict[int, list[Flow]]:
    return await _read_shards(
        shard_tables,
        connect,
        reads,
        lambda home, after: flow_statement(home, query, after, limit),
        flow_from_row,
        flow_rank,
    )


async def search_tasks(
    shard_tables: Callable[[int], ShardTables],
    connect: Connect,
    query: TaskQuery,
    reads: Mapping[int, TaskPosition | None],
    limit: int,
) -> dict[int, list[Task]]:
    return await _read_shards(
        shard_tables,
        connect,
        reads,
        lambda home, after: task_statement(home, query, after, limit),
        task_from_row,
        lambda task: task_rank(query, task),
    )


async def _read_shards(
    shard_tables: Callable[[int], ShardTables],
    connect: Connect,
    reads: Mapping[int, Position | None],
    statement_of: Callable[[ShardTables, Position | None], Select[Any]],
    decode: Callable[[Mapping[Any, Any]], Item],
    rank: Callable[[Item], Any],
) -> dict[int, list[Item]]:
    by_database: dict[str, list[tuple[ShardTables, Position | None]]] = defaultdict(list)
    for shard, after in reads.items():
        home = shard_tables(shard)
        by_database[home.database.name].append((home, after))
    slots: dict[str, asyncio.Semaphore] = {}
    found: dict[int, list[Item]] = {shard: [] for shard in reads}

    async def read(homes: list[tuple[ShardTables, Position | None]]) -> None:
        first = homes[0][0]
        parts = [statement_of(home, after) for home, after in homes]
        statement: Any = parts[0] if len(parts) == 1 else union_all(*(select(part.subquery()) for part in parts))
        url = first.database.engine_url
        slot = slots.setdefault(url, asyncio.Semaphore(STATEMENTS_PER_SERVER))
        async with slot, connect(url) as conn:
            rows = await conn.execute(statement, execution_options=first.options)
            for row in rows.mappings():
                item = decode(row)
                found[shard_of_task_id(item.task_id if isinstance(item, Flow) else item.id)].append(item)

    await asyncio.gather(*(read(homes) for homes in by_database.values()))
    for items in found.values():
        items.sort(key=rank)  # a UNION ALL keeps each part's rows, not their order
    return found
