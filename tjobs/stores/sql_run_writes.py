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

Reports of one server that arrive while others are being written go together (:class:`ReportGroups`, group
commit as :class:`tjobs.stores.sql_direct.GroupCommit` does for creates): one transaction reads them all in
one ``SELECT`` (a ``UNION ALL``: the fences of their databases first, then each flow under its lock) and
writes each one's ``UPDATE`` with one ``COMMIT`` in one round trip, so a report costs its ``UPDATE`` and a
share of two statements where it cost three (issue 30, the run-reports bench). Each caller gets the answer
it would have had alone, once the group's ``COMMIT`` returned.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tjobs.model import Flow, FlowUpdate, Task
from tjobs.stores.contracts.runs import RunWrite
from tjobs.stores.flow_documents import run_to_text
from tjobs.stores.schema import TASK_COLUMNS, clip_error, flow_from_row, task_from_row
from tjobs.stores.shard_fence import fence_derived_table, fence_union_part
from tjobs.stores.sql_direct import DirectPool, answered_by_server, committed_in_batch
from tjobs.stores.sql_layout import DatabaseHome, ShardTables

_READS: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {}
_WRITES: dict[tuple[str, bool], str] = {}
_CACHE_MAX = 4096  # tables of layouts since reloaded: emptied when full
_TASK_ID = TASK_COLUMNS.index("id")


def _read_sql(home: ShardTables) -> tuple[str, tuple[str, ...]]:
    """Past the fence of the flow's database, the flow by its key under a row lock, with its task by id
    (unlocked: a derived table, which MariaDB's ``FOR UPDATE`` leaves out, as it does a subquery), in one
    statement; the flow's column names (the task's columns follow them, :data:`TASK_COLUMNS`).
    Parameters: the writer's epoch, the task id, then the flow's key."""
    return _flow_with_task_sql(home, fence_derived_table(home.database))


def _part_sql(home: ShardTables) -> tuple[str, tuple[str, ...]]:
    """:func:`_read_sql` without the fence, as a part of a group's ``UNION ALL`` (:func:`decide_runs`, whose
    fences come first). Parameters: the task id, then the flow's key."""
    return _flow_with_task_sql(home, None)


def _flow_with_task_sql(home: ShardTables, fence: str | None) -> tuple[str, tuple[str, ...]]:
    """The two reads above, built once per table (and fence) and kept. The flow is found by its primary
    key, forced: read along ``flows_TT_at`` (as MariaDB chose at times for the fenced form), the lock on that
    index's entry came before the row's, while a racing report's ``UPDATE``, holding the row, waited for the
    same entry: a deadlock (1213) between two reports of one flow."""
    key = (fence or "", home.flows_sql, home.tasks_sql)
    found = _READS.get(key)
    if found is None:
        names = tuple(column.name for column in home.flows.c)
        columns = ", ".join([*(f"fl.{name}" for name in names), *(f"tk.{name}" for name in TASK_COLUMNS)])
        source, admitted = (f"{fence} STRAIGHT_JOIN ", "fence.admitted = 1 AND ") if fence else ("", "")
        sql = (
            f"SELECT {columns} FROM {source}{home.flows_sql} fl FORCE INDEX (PRIMARY) "
            f"LEFT JOIN (SELECT {', '.join(TASK_COLUMNS)} FROM {home.tasks_sql} WHERE id = %s) tk "
            f"ON tk.id = fl.task_id WHERE {admitted}fl.task_id = %s AND fl.scheduled_at = %s FOR UPDATE"
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


def _flow_and_task(row: Any, names: tuple[str, ...]) -> tuple[Flow | None, Task | None]:
    """A read's row (the flow's columns ``names``, then :data:`TASK_COLUMNS`): the flow and its task."""
    if row is None:
        return None, None
    split = len(names)
    flow = flow_from_row(dict(zip(names, row[:split], strict=True)))
    if row[split + _TASK_ID] is None:  # no task (deleted): its columns are NULL
        return flow, None
    return flow, task_from_row(dict(zip(TASK_COLUMNS, row[split:], strict=True)))


async def decide_run(
    pool: DirectPool,
    home: ShardTables,
    fence_epoch: int,
    task_id: int,
    scheduled_at_ms: int,
    decide: Callable[[Flow | None, Task | None], RunWrite | None],
) -> bool:
    """See the module: whether what ``decide`` chose was written. Reports of ``pool``'s server sent while
    others are being written go together (:class:`ReportGroups`); one alone is :func:`decide_alone`."""
    groups = _GROUPS.get(pool)
    if groups is None:
        groups = _GROUPS[pool] = ReportGroups(pool)
    return await groups.decide_run(Report(home, task_id, scheduled_at_ms, decide, fence_epoch))


async def decide_alone(
    pool: DirectPool,
    home: ShardTables,
    fence_epoch: int,
    task_id: int,
    scheduled_at_ms: int,
    decide: Callable[[Flow | None, Task | None], RunWrite | None],
) -> bool:
    """One report in a transaction of its own (see the module)."""
    read_sql, names = _read_sql(home)
    async with pool.transaction(commit=False) as conn:
        cursor = conn.cursor()
        try:
            await cursor.execute(read_sql, (fence_epoch, task_id, task_id, scheduled_at_ms))
            flow, task = _flow_and_task(await cursor.fetchone(), names)  # one statement, one result
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


# ---- reports sent together (issue 30) ------------------------------------------------------------------

GROUPS_IN_FLIGHT = 2  # a server's groups of reports being written at once; arrivals meanwhile form the next
GROUP_ROWS = 64  # reports a group takes at most

Decide = Callable[[Flow | None, Task | None], RunWrite | None]


@dataclass(frozen=True, slots=True)
class Report:
    """One report of a group: its flow's home and key, its caller's ``decide`` and shard-map epoch."""

    home: ShardTables
    task_id: int
    scheduled_at_ms: int
    decide: Decide
    fence_epoch: int


async def decide_runs(pool: DirectPool, fence_epoch: int, reports: Sequence[Report]) -> list[bool | Exception]:
    """:func:`decide_run` for several reports (of distinct flows of one server) in one transaction: per
    report whether what its ``decide`` chose was written, or what ``decide`` raised. Three statements a
    report became one (its ``UPDATE``) and two a group: one ``SELECT`` (a ``UNION ALL``) that first passes
    the fence of each database it reads, share-locked in database order (as every write of several
    databases: :func:`tjobs.stores.shard_fence.fence_statement`), then reads each flow under its row's lock
    with its task unlocked (:func:`_read_sql`'s join), in shard and key order (as the outcome flush locks
    them); then the ``UPDATE`` s and the ``COMMIT`` in one round trip (a fixed_delay task's next run takes
    one more, sent once its flow's ``UPDATE`` landed, as alone). An error of the statements (the server's
    refusal, a lost connection) is raised: nothing of the group is written."""
    ordered = sorted(
        range(len(reports)), key=lambda i: (reports[i].home.shard, reports[i].task_id, reports[i].scheduled_at_ms)
    )
    databases: dict[int, DatabaseHome] = {report.home.database.index: report.home.database for report in reports}
    parts: list[str] = []
    params: list[Any] = []
    names: tuple[str, ...] = ()
    for i in ordered:
        report = reports[i]
        part, names = _part_sql(report.home)
        parts.append(part)
        params += (report.task_id, report.task_id, report.scheduled_at_ms)
    width = len(names) + len(TASK_COLUMNS)
    fences = [fence_union_part(databases[index], width) for index in sorted(databases)]
    read_sql = " UNION ALL ".join(f"({part})" for part in [*fences, *parts])
    task_at, scheduled_at = names.index("task_id"), names.index("scheduled_at")
    outcomes: list[bool | Exception] = [False] * len(reports)
    async with pool.transaction(commit=False) as conn:
        cursor = conn.cursor()
        try:
            await cursor.execute(read_sql, [fence_epoch] * len(fences) + params)
            rows = {
                (row[task_at], row[scheduled_at]): row for row in await cursor.fetchall() if row[task_at] is not None
            }
            writes: list[tuple[int, RunWrite, ShardTables]] = []
            for i in ordered:
                report = reports[i]
                row = rows.get((report.task_id, report.scheduled_at_ms))
                try:
                    chosen = report.decide(*_flow_and_task(row, names))
                except Exception as error:  # this report's own answer (a 404, a 409): the others go on
                    outcomes[i] = error
                    continue
                if chosen is not None:
                    writes.append((i, chosen, report.home))
            if not writes:
                await conn.rollback()
                return outcomes
            later = any(chosen.update.reschedule is not None for _, chosen, _ in writes)
            sql = "; ".join(_write_sql(home, chosen.update.run is not None) for _, chosen, home in writes)
            await cursor.execute(
                sql if later else f"{sql}; COMMIT", [p for _, c, _ in writes for p in _write_params(c)]
            )
            counts = [cursor.rowcount]
            for _ in writes[1:]:
                await cursor.nextset()
                counts.append(cursor.rowcount)
            await _drain(cursor)
            landed = [(i, chosen, home) for (i, chosen, home), count in zip(writes, counts, strict=True) if count > 0]
            if later:
                moves = [
                    _reschedule(home, c.update, c.now_ms) for _, c, home in landed if c.update.reschedule is not None
                ]
                await cursor.execute(
                    "; ".join([*(sql for sql, _ in moves), "COMMIT"]), [p for _, ps in moves for p in ps]
                )
                await _drain(cursor)
            committed_in_batch(conn)
            for i, _, _ in landed:
                outcomes[i] = True
            return outcomes
        finally:
            await cursor.close()


@dataclass(slots=True, eq=False)
class _Waiting:
    report: Report
    future: asyncio.Future[bool]


class ReportGroups:
    """A server's reports (:meth:`tjobs.stores.contracts.runs.RunRecords.decide_run`) written together, as
    :class:`tjobs.stores.sql_direct.GroupCommit` writes single creates: while fewer than ``in_flight``
    groups are being written a report goes at once (alone: :func:`decide_run`, no added latency); arrivals
    meanwhile queue, and the next group takes up to ``max_rows`` of them, one a flow (a second report of a
    flow waits for the next group, so it reads what the first wrote). Group commit, not write-behind: each
    caller is answered once its group's ``COMMIT`` returned. A group the server refused (a lock wait, a
    deadlock, the fence of one database) is rolled back whole and each of its reports sent again alone, so
    each gets the answer it would have had alone; a lost connection is every report's error (the outcome
    unknown, as alone)."""

    def __init__(self, pool: DirectPool, *, in_flight: int = GROUPS_IN_FLIGHT, max_rows: int = GROUP_ROWS) -> None:
        self._pool = pool
        self._in_flight = in_flight
        self._max_rows = max_rows
        self._queue: list[_Waiting] = []
        self._flushing = 0
        self._flushes: set[asyncio.Future[None]] = set()

    async def decide_run(self, report: Report) -> bool:
        waiting = _Waiting(report, asyncio.get_running_loop().create_future())
        self._queue.append(waiting)
        if self._flushing < self._in_flight:
            self._flushing += 1
            flush = asyncio.ensure_future(self._flush())
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)
        return await waiting.future

    def _take(self) -> list[_Waiting]:
        group: list[_Waiting] = []
        keys: set[tuple[int, int]] = set()
        rest: list[_Waiting] = []
        for waiting in self._queue:
            key = (waiting.report.task_id, waiting.report.scheduled_at_ms)
            if key in keys or len(group) >= self._max_rows:
                rest.append(waiting)
            else:
                keys.add(key)
                group.append(waiting)
        self._queue = rest
        return group

    async def _flush(self) -> None:
        group: list[_Waiting] = []
        try:
            while self._queue:
                group = self._take()
                outcomes = await self._write([waiting.report for waiting in group])
                for waiting, outcome in zip(group, outcomes, strict=True):
                    if waiting.future.done():
                        continue
                    if isinstance(outcome, BaseException):
                        waiting.future.set_exception(outcome)
                    else:
                        waiting.future.set_result(outcome)
                group = []
        except asyncio.CancelledError:  # the store is closing: nobody waits forever
            for waiting in group + self._queue:
                waiting.future.cancel()
            self._queue.clear()
            raise
        finally:
            self._flushing -= 1

    async def _write(self, reports: list[Report]) -> Sequence[bool | BaseException]:
        if len(reports) > 1:
            try:
                # the oldest epoch its callers resolved their flows' homes under: a fence past it refuses the
                # group, and each report alone is then judged under its own epoch (a report resolved under an
                # older map than a fence's must be refused, whatever map the others of its group saw)
                return await decide_runs(self._pool, min(report.fence_epoch for report in reports), reports)
            except Exception as error:
                if not answered_by_server(error):
                    return [error] * len(reports)
            # refused by the server, rolled back: each again on its own, answered as it would be alone
        return await asyncio.gather(*(self._alone(report) for report in reports), return_exceptions=True)

    async def _alone(self, report: Report) -> bool:
        return await decide_alone(
            self._pool, report.home, report.fence_epoch, report.task_id, report.scheduled_at_ms, report.decide
        )


_GROUPS: weakref.WeakKeyDictionary[DirectPool, ReportGroups] = weakref.WeakKeyDictionary()  # by run pool
