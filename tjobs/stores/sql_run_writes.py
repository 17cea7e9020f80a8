"""A run's report on MariaDB (:meth:`tjobs.stores.contracts.runs.RunRecords.decide_run`): the flow read
under its row's lock in the transaction that writes the report, on a raw asyncmy connection of the
server's run pool (:meth:`tjobs.stores.sql_direct.DirectPool.transaction`, the fire pool's sessions).

Through SQLAlchemy a report was three round trips and five statements (the read and the ``ROLLBACK``
that closed it; the fence with the guarded ``UPDATE``, and the ``COMMIT``), each paying the engine's
checkout, greenlet bridge and result handling: a quarter of a report's node CPU (issue 30). Here it is
two round trips and three statements: one ``SELECT … FOR UPDATE`` of the flow that first passes the
shard-map fence (:func:`tjobs.stores.shard_fence.fence_derived_table`: the fence row share-locked before
the flow's, error 1242 under an older epoch whether or not the flow exists) and joins its task's row as
a derived table, which MariaDB reads without a lock (the task row is not locked: a fire of the task never
waits for a report; the fence, the flow and its task were three statements); then, once ``decide``
chose, the same guarded ``UPDATE`` as
:meth:`SqlRunRecords.write_run` and the ``COMMIT`` (a ``ROLLBACK`` when ``decide`` chose nothing). The
row's lock makes the guard hold: a racing report waits for this one and reads what it wrote. A
fixed_delay task's next run (a :class:`~tjobs.model.Reschedule`) takes a round trip more, sent only once
the flow's ``UPDATE`` landed. What ``decide`` raises rolls the transaction back. The SQL is built by hand
once per table (only identifiers from the topology in its text).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tjobs.model import Flow, FlowUpdate, Task
from tjobs.stores.contracts.runs import RunWrite
from tjobs.stores.flow_documents import run_to_text
from tjobs.stores.schema import TASK_COLUMNS, clip_error, flow_from_row, task_from_row
from tjobs.stores.shard_fence import fence_derived_table
from tjobs.stores.sql_direct import DirectPool, committed_in_batch
from tjobs.stores.sql_layout import ShardTables

_READS: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {}
_WRITES: dict[tuple[str, bool], str] = {}
_CACHE_MAX = 4096  # tables of layouts since reloaded: emptied when full
_TASK_ID = TASK_COLUMNS.index("id")


def _read_sql(home: ShardTables) -> tuple[str, tuple[str, ...]]:
    """Past the fence of the flow's database, the flow by its key under a row lock, with its task by id
    (unlocked: a derived table, which MariaDB's ``FOR UPDATE`` leaves out, as it does a subquery), in one
    statement; the flow's column names (the task's columns follow them, :data:`TASK_COLUMNS`).
    Parameters: the writer's epoch, the task id, then the flow's key."""
    fence = fence_derived_table(home.database)
    key = (fence, home.flows_sql, home.tasks_sql)
    found = _READS.get(key)
    if found is None:
        names = tuple(column.name for column in home.flows.c)
        columns = ", ".join([*(f"fl.{name}" for name in names), *(f"tk.{name}" for name in TASK_COLUMNS)])
        sql = (
            f"SELECT {columns} FROM {fence} STRAIGHT_JOIN {home.flows_sql} fl "
            f"LEFT JOIN (SELECT {', '.join(TASK_COLUMNS)} FROM {home.tasks_sql} WHERE id = %s) tk "
            "ON tk.id = fl.task_id WHERE fence.admitted = 1 AND fl.task_id = %s AND fl.scheduled_at = %s FOR UPDATE"
        )
        if len(_READS) >= _CACHE_MAX:
            _READS.clear()
        found = _READS[key] = (sql, names)
    return found


def _write_sql(home: ShardTables, with_run: bool) -> str:
    """:meth:`SqlRunRecords.write_run`'s guarded ``UPDATE`` as text."""
    key = (home.flows_sql, with_run)
    sql = _WRITES.get(key)
    if sql is None:
        if len(_WRITES) >= _CACHE_MAX:
            _WRITES.clear()
        sql = _WRITES[key] = (
            f"UPDATE {home.flows_sql} SET status = %s, attempts = %s, next_attempt_at = %s, last_error = %s, "
            f"updated_at = %s{', run = %s' if with_run else ''} "
            "WHERE task_id = %s AND scheduled_at = %s AND status = %s AND attempts = %s"
        )
    return sql


def _write_params(chosen: RunWrite) -> list[Any]:
    u = chosen.update
    params: list[Any] = [u.status.value, u.attempts, u.next_attempt_at_ms, clip_error(u.last_error), chosen.now_ms]
    if u.run is not None:
        params.append(run_to_text(u.run))
    params += [u.task_id, u.scheduled_at_ms, chosen.expected.value, chosen.expected_attempts]
    return params


def _reschedule(home: ShardTables, u: FlowUpdate, now_ms: int) -> tuple[str, list[Any]]:
    moved = u.reschedule
    assert moved is not None
    return (
        f"UPDATE {home.tasks_sql} SET next_run_at = %s, updated_at = %s "
        "WHERE id = %s AND status = 'active' AND next_run_at = %s AND version = %s",
        [moved.next_run_at_ms, now_ms, u.task_id, moved.parked_at_ms, moved.version],
    )


async def _drain(cursor: Any) -> None:
    while await cursor.nextset():
        pass


async def decide_run(
    pool: DirectPool,
    home: ShardTables,
    fence_epoch: int,
    task_id: int,
    scheduled_at_ms: int,
    decide: Callable[[Flow | None, Task | None], RunWrite | None],
) -> bool:
    """See the module: whether what ``decide`` chose was written."""
    read_sql, names = _read_sql(home)
    async with pool.transaction(commit=False) as conn:
        cursor = conn.cursor()
        try:
            await cursor.execute(read_sql, (fence_epoch, task_id, task_id, scheduled_at_ms))
            row = await cursor.fetchone()  # one statement, one result
            split = len(names)
            flow = None if row is None else flow_from_row(dict(zip(names, row[:split], strict=True)))
            task = (
                None
                if row is None or row[split + _TASK_ID] is None  # no task (deleted): its columns are NULL
                else task_from_row(dict(zip(TASK_COLUMNS, row[split:], strict=True)))
            )
            chosen = decide(flow, task)
            if chosen is None:
                await conn.rollback()
                return False
            write_sql = _write_sql(home, chosen.update.run is not None)
            if chosen.update.reschedule is None:
                await cursor.execute(f"{write_sql}; COMMIT", _write_params(chosen))
                written: bool = cursor.rowcount > 0
                await _drain(cursor)
                committed_in_batch(conn)
                return written
            await cursor.execute(write_sql, _write_params(chosen))
            if cursor.rowcount <= 0:
                await conn.rollback()
                return False
            sql, params = _reschedule(home, chosen.update, chosen.now_ms)
            await cursor.execute(f"{sql}; COMMIT", params)
            await _drain(cursor)
            committed_in_batch(conn)
            return True
        finally:
            await cursor.close()
