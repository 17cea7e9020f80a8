"""The cycle load's query (:meth:`tjobs.stores.contracts.FirePath.load_due`), written once as text SQL:
on MariaDB it runs on the server's direct pool (:class:`tjobs.stores.sql_direct.DirectPool`: autocommit,
``READ COMMITTED``), on SQLite through the engine's connection (``?`` marks).

A cycle load runs one ``load_due`` per shard and page, most of them answering few rows or none, so the
query's fixed cost sets the load's: through SQLAlchemy Core, building the ``select`` and running it
through the engine (compilation cache lookup, the greenlet bridge, pool checkout and checkin, the
``ROLLBACK`` closing the read) was most of the node's CPU per call (docs/benchmarks.md, issue 2).
Here the statement text is built once per (table, form) and its values are bound parameters; only
identifiers from the topology (:attr:`ShardTables.tasks_sql`) go into the text.

The plan is a range scan of ``(status, next_run_at)``, no filesort (tests/integration/test_store_sql.py
EXPLAINs every form): the skip as two ranges, the ``after`` keyset with its redundant lower bound.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from tjobs.model import DueTask, MisfirePolicy
from tjobs.stores.sql_direct import DirectPool
from tjobs.stores.sql_layout import ShardTables

_POLICIES = {policy.value: policy for policy in MisfirePolicy}


@functools.cache
def _statement(tasks_sql: str, after: bool, skip: bool, mark: str) -> str:
    where = ["status = 'active'", "next_run_at < %s"]
    if skip:  # two ranges of (status, next_run_at): below the span and from its end
        where.append("(next_run_at < %s OR next_run_at >= %s)")
    if after:  # the redundant lower bound keeps this a range scan of (status, next_run_at)
        where.append("next_run_at >= %s")
        where.append("(next_run_at > %s OR (next_run_at = %s AND id > %s))")
    sql = (
        f"SELECT id, next_run_at, version, app_id, misfire_policy FROM {tasks_sql}"
        f" WHERE {' AND '.join(where)} ORDER BY next_run_at, id LIMIT %s"
    )
    return sql.replace("%s", mark)


def load_due_query(
    home: ShardTables,
    before_ms: int,
    limit: int,
    after: tuple[int, int] | None = None,
    skip: tuple[int, int] | None = None,
    mark: str = "%s",
) -> tuple[str, tuple[int, ...]]:
    """The statement text and its parameters, as :func:`load_due` runs them: ``mark`` is the driver's
    parameter mark (asyncmy ``%s``, sqlite3 ``?``)."""
    params: list[int] = [before_ms]
    if skip is not None:
        params.extend(skip)
    if after is not None:
        after_at, after_id = after
        params.extend((after_at, after_at, after_at, after_id))
    params.append(limit)
    return _statement(home.tasks_sql, after is not None, skip is not None, mark), tuple(params)


async def load_due(
    pool: DirectPool,
    home: ShardTables,
    before_ms: int,
    limit: int,
    after: tuple[int, int] | None = None,
    skip: tuple[int, int] | None = None,
) -> list[DueTask]:
    """One page of the shard's due tasks (:meth:`tjobs.stores.base.TaskStore.load_due`). The driver's
    errors are the caller's to map (:meth:`SQLAlchemyTaskStore._direct_call`). A load cancelled while
    it waits for its answer (the runner cancels the loads of a paused shard) leaves no half-read
    connection in the pool: asyncmy closes a connection whose read was cancelled, and its pool does
    not take a closed one back (tests/integration/test_store_sql_load.py)."""
    sql, params = load_due_query(home, before_ms, limit, after, skip)
    async with pool.cursor() as cursor:
        await cursor.execute(sql, params)
        rows = await cursor.fetchall()
    return due_tasks(rows)


def due_tasks(rows: Iterable[Sequence[Any]]) -> list[DueTask]:
    """The due tasks of the statement's rows."""
    return [
        DueTask(int(task_id), int(next_run_at), int(version), app_id, _POLICIES.get(policy) or MisfirePolicy(policy))
        for task_id, next_run_at, version, app_id, policy in rows
    ]
