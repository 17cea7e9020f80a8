"""The SQL store's searches across shards (:meth:`TaskStore.search_flows`, :meth:`TaskStore.search_tasks`).

Each shard is read as one ordered index range, ``LIMIT`` rows past its position (:class:`Read`). A
search round sends at most :data:`STATEMENTS_PER_SERVER` statements to each server, all servers at
once: each statement is one ``UNION ALL`` of up to :data:`PARTS_PER_STATEMENT` shards' reads (on
MariaDB across logical databases, the table names being qualified; on SQLite within its file).

The SQL is written out here, not built with SQLAlchemy Core, and sent with ``exec_driver_sql``: a
first page reads all 512 shards, and building, cache-keying and compiling 512 ``Select`` objects cost
more client CPU than the database spent answering them (the profile in docs/benchmarks.md, issue 16).
Only identifiers of the topology go into the text; every value is a bound parameter.

MariaDB reads each part as a parenthesized ``(SELECT ... ORDER BY ... LIMIT n)``, which it answers
straight from the index with no temporary table. SQLite has no parenthesized compound parts, so
there each part is a derived table ``SELECT * FROM (SELECT ... LIMIT n)``, whose ``ORDER BY ...
LIMIT`` SQLite keeps. (MariaDB materializes such derived tables: with the flows' and tasks' ``TEXT``
columns each was an on-disk Aria temporary table, 16 created and dropped per statement.)

The indexes that make each read a range come with migration ``0007_search``
(:func:`tjobs.stores.schema.search_task_indexes`, :func:`tjobs.stores.schema.search_flow_indexes`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from sharding import shard_of_task_id
from tjobs.model import Flow, Task
from tjobs.stores.queries import (
    NO_ANSWER,
    FlowPosition,
    FlowQuery,
    TaskPosition,
    TaskQuery,
    flow_rank,
    prefix_upper_bound,
    task_rank,
)
from tjobs.stores.schema import SCHEDULE_KIND_COLUMN, flow_from_row, task_from_row
from tjobs.stores.sql_layout import MYSQL, SQLITE, ShardTables

STATEMENTS_PER_SERVER = 4  # a search round's statements per server, sent at once
PARTS_PER_STATEMENT = 128  # shards' reads per statement at most (SQLite allows 500 compound parts)

Item = TypeVar("Item", Flow, Task)
Position = TypeVar("Position", FlowPosition, TaskPosition)
Connect = Callable[[str], AbstractAsyncContextManager[AsyncConnection]]


@dataclass(frozen=True, slots=True)
class Read:
    """One shard's read: a ``SELECT`` of the table's ``columns`` in the search's order, ``LIMIT`` rows,
    with its bound values; its placeholders are the driver's (``%s`` on MariaDB, ``?`` on SQLite)."""

    sql: str
    params: tuple[Any, ...]
    columns: tuple[str, ...]


_COLUMNS: dict[str, tuple[str, ...]] = {}


def _columns(table: Any) -> tuple[str, ...]:
    """The table's column names (its ``Table`` is shared by every database, so by its name)."""
    names = _COLUMNS.get(table.name)
    if names is None:
        names = _COLUMNS[table.name] = tuple(column.name for column in table.columns)
    return names


def _from(table_sql: str, index: str, dialect: str) -> str:
    """The table, on MariaDB with the index its read must use: the optimizer's choice rests on
    statistics that ``STATS_AUTO_RECALC=0`` (migration 0010) leaves as old as the last ``ANALYZE``, and
    with 10 million flows it read an app's dead flows along ``(app_id, scheduled_at)``, filtering the
    status row by row (a dozen random reads per row returned) instead of the ``(app_id, status,
    scheduled_at)`` range. SQLite's planner picks these ranges without statistics."""
    return f"{table_sql} FORCE INDEX (`{index}`)" if dialect == MYSQL else table_sql


def _mark(dialect: str) -> str:
    return "?" if dialect == SQLITE else "%s"


def flow_read(
    home: ShardTables, query: FlowQuery, after: FlowPosition | None, limit: int, dialect: str = MYSQL
) -> Read:
    """``(app_id, [status,] scheduled_at, task_id)`` descending, or a task's own flows by the primary key
    ``(task_id, scheduled_at)``."""
    mark = _mark(dialect)
    index, where, params = _flow_range(home, query, dialect)
    if after is not None:
        at, task_id = after
        # the redundant bound keeps it one range of the index
        where.append(
            f"scheduled_at <= {mark} AND (scheduled_at < {mark} OR (scheduled_at = {mark} AND task_id < {mark}))"
        )
        params += [at, at, at, task_id]
    columns = _columns(home.flows)
    sql = (
        f"SELECT {', '.join(columns)} FROM {_from(home.flows_sql, index, dialect)} WHERE {' AND '.join(where)} "
        f"ORDER BY scheduled_at DESC, task_id DESC LIMIT {mark}"
    )
    return Read(sql, (*params, limit), columns)


def flow_count_read(home: ShardTables, query: FlowQuery, cap: int, dialect: str = MYSQL) -> Read:
    """How many of the shard's flows match, counting at most ``cap`` (the same index range as
    :func:`flow_read`, stopped after ``cap`` rows): one row, ``(shard, count)``."""
    mark = _mark(dialect)
    index, where, params = _flow_range(home, query, dialect)
    inner = f"SELECT 1 FROM {_from(home.flows_sql, index, dialect)} WHERE {' AND '.join(where)} LIMIT {mark}"
    sql = f"SELECT {home.shard} AS shard, COUNT(*) AS matched FROM ({inner}) counted"
    return Read(sql, (*params, cap), ("shard", "matched"))


def _flow_range(home: ShardTables, query: FlowQuery, dialect: str) -> tuple[str, list[str], list[Any]]:
    """The index a flow search reads and its ``WHERE`` terms with their values (see :class:`FlowQuery`):
    ``(app_id, [status,] scheduled_at)``, or the primary key for given tasks; the other filters checked
    on each row of that range, a task's name or target in the flow's own shard."""
    mark = _mark(dialect)
    table = home.flows.name
    by_task = query.task_id is not None or query.task_ids is not None
    index = "PRIMARY" if by_task else f"{table}_app_status_at" if query.status else f"{table}_app_at"
    where = [f"app_id = {mark}"]
    params: list[Any] = [query.app_id]
    if query.task_id is not None:
        where.append(f"task_id = {mark}")
        params.append(query.task_id)
    if query.task_ids is not None:
        where.append(f"task_id IN ({', '.join([mark] * len(query.task_ids))})" if query.task_ids else "1 = 0")
        params += query.task_ids
    if query.status is not None:
        where.append(f"status = {mark}")
        params.append(query.status.value)
    if query.retrying:
        where.append("attempts >= 1")
    if query.from_ms is not None:
        where.append(f"scheduled_at >= {mark}")
        params.append(query.from_ms)
    if query.until_ms is not None:
        where.append(f"scheduled_at < {mark}")
        params.append(query.until_ms)
    if query.answer == NO_ANSWER:
        where.append("last_status_code IS NULL")
    elif query.answer is not None:
        where.append(f"last_status_code BETWEEN {mark} AND {mark}")
        params += query.answer
    if query.changed_before_ms is not None:
        where.append(f"updated_at < {mark}")
        params.append(query.changed_before_ms)
    if query.task_name_prefix is not None:
        named = f"SELECT id FROM {home.tasks_sql} WHERE app_id = {mark} AND name >= {mark}"
        params += [query.app_id, query.task_name_prefix]
        upper = prefix_upper_bound(query.task_name_prefix)
        if upper is not None:
            named += f" AND name < {mark}"
            params.append(upper)
        where.append(f"task_id IN ({named})")
    if query.target is not None:
        named = f"SELECT task_id FROM {home.task_targets_sql} WHERE app_id = {mark} AND target = {mark}"
        where.append(f"task_id IN ({named})")
        params += [query.app_id, query.target]
    return index, where, params


def task_read(
    home: ShardTables, query: TaskQuery, after: TaskPosition | None, limit: int, dialect: str = MYSQL
) -> Read:
    """The app's ``(name, id)`` range of the prefix ascending, or its ids descending (through ``(app_id,
    status, id)``, ``(app_id, schedule_kind, id)`` or ``(app_id, id)``); with a key, its one row."""
    mark = _mark(dialect)
    table = home.tasks.name
    if query.key is not None:
        index = f"{table}_app_key"
    elif query.name_prefix is not None:
        index = f"{table}_app_name"
    elif query.status is not None:
        index = f"{table}_app_status"
    elif query.kind is not None:
        index = f"{table}_app_kind"
    else:
        index = f"{table}_app"
    where = [f"app_id = {mark}"]
    params: list[Any] = [query.app_id]
    if query.key is not None:
        where.append(f"idem_key = {mark}")
        params.append(query.key)
    if query.status is not None:
        where.append(f"status = {mark}")
        params.append(query.status.value)
    if query.kind is not None:
        where.append(f"{SCHEDULE_KIND_COLUMN} = {mark}")
        params.append(query.kind.value)
    if query.name_prefix is not None:
        where.append(f"name >= {mark}")
        params.append(query.name_prefix)
        upper = prefix_upper_bound(query.name_prefix)
        if upper is not None:
            where.append(f"name < {mark}")
            params.append(upper)
        if after is not None:
            name, task_id = after
            where.append(f"name >= {mark} AND (name > {mark} OR (name = {mark} AND id > {mark}))")
            params += [name, name, name, task_id]
        order = "name, id"
    else:
        if after is not None:
            where.append(f"id < {mark}")
            params.append(after[1])
        order = "id DESC"
    columns = _columns(home.tasks)
    sql = (
        f"SELECT {', '.join(columns)} FROM {_from(home.tasks_sql, index, dialect)} WHERE {' AND '.join(where)} "
        f"ORDER BY {order} LIMIT {mark}"
    )
    return Read(sql, (*params, limit), columns)


def union_sql(parts: Sequence[str], dialect: str) -> str:
    """One statement of several reads, each keeping its own ``ORDER BY ... LIMIT`` (see the module)."""
    if len(parts) == 1:
        return parts[0]
    if dialect == SQLITE:
        return "SELECT * FROM (" + ") UNION ALL SELECT * FROM (".join(parts) + ")"
    return "(" + ") UNION ALL (".join(parts) + ")"


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
        lambda home, after, dialect: flow_read(home, query, after, limit, dialect),
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
        lambda home, after, dialect: task_read(home, query, after, limit, dialect),
        task_from_row,
        lambda task: task_rank(query, task),
    )


async def count_flows(
    shard_tables: Callable[[int], ShardTables], connect: Connect, query: FlowQuery, caps: Mapping[int, int]
) -> dict[int, int]:
    """Per shard of ``caps``, its matching flows counted up to its cap: one ``UNION ALL`` statement of
    :func:`flow_count_read` per group of a server's shards, as a search round."""
    by_server: dict[str, list[int]] = defaultdict(list)
    for shard in caps:
        by_server[shard_tables(shard).database.engine_url].append(shard)
    counted: dict[int, int] = dict.fromkeys(caps, 0)

    async def count(url: str, shards: list[int]) -> None:
        async with connect(url) as conn:
            dialect = SQLITE if conn.dialect.name == SQLITE else MYSQL
            parts = [flow_count_read(shard_tables(shard), query, caps[shard], dialect) for shard in shards]
            params = tuple(value for part in parts for value in part.params)
            rows = (await conn.exec_driver_sql(union_sql([part.sql for part in parts], dialect), params)).mappings()
            counted.update({int(row["shard"]): int(row["matched"]) for row in rows})

    await asyncio.gather(*(count(url, shards) for url, shards in by_server.items() for shards in statements_of(shards)))
    return counted


def statements_of(shards: Sequence[int], per_server: int = STATEMENTS_PER_SERVER) -> list[list[int]]:
    """A server's shards split into at most ``per_server`` statements (more only past
    :data:`PARTS_PER_STATEMENT` each), in shard order."""
    size = max(1, min(PARTS_PER_STATEMENT, -(-len(shards) // per_server)))
    ordered = sorted(shards)
    return [ordered[start : start + size] for start in range(0, len(ordered), size)]


async def _read_shards(
    shard_tables: Callable[[int], ShardTables],
    connect: Connect,
    reads: Mapping[int, Position | None],
    read_of: Callable[[ShardTables, Position | None, str], Read],  # (home, after, dialect)
    decode: Callable[[Mapping[Any, Any]], Item],
    rank: Callable[[Item], Any],
) -> dict[int, list[Item]]:
    by_server: dict[str, list[int]] = defaultdict(list)
    for shard in reads:
        by_server[shard_tables(shard).database.engine_url].append(shard)
    found: dict[int, list[Item]] = {shard: [] for shard in reads}

    async def read(url: str, shards: list[int]) -> None:
        async with connect(url) as conn:
            dialect = SQLITE if conn.dialect.name == SQLITE else MYSQL
            parts = [read_of(shard_tables(shard), reads[shard], dialect) for shard in shards]
            params = tuple(value for part in parts for value in part.params)
            rows = (await conn.exec_driver_sql(union_sql([part.sql for part in parts], dialect), params)).all()
        columns = parts[0].columns
        for row in rows:
            item = decode(dict(zip(columns, row, strict=True)))
            found[shard_of_task_id(item.task_id if isinstance(item, Flow) else item.id)].append(item)

    await asyncio.gather(*(read(url, shards) for url, shards in by_server.items() for shards in statements_of(shards)))
    for items in found.values():
        items.sort(key=rank)  # a UNION ALL keeps each part's rows, not their order
    return found
