"""Delivery outcomes written in bulk: the statements are written once, here, for both dialects. On
MariaDB one transaction and one round trip per server; on SQLite (one writer per file, no network)
the same statements one at a time in a transaction per file, with sqlite3's ``?`` mark
(:func:`run_flow_updates`).

The deliverer flushes hundreds of outcomes at a time, spread over as many shards as there are flows
(a 512-shard topology puts nearly every flow in its own table). Written as one SQLAlchemy ``UPDATE``
per shard and per distinct outcome, each compiled afresh (the ``IN`` list and the schema change every
time) and sent on its own round trip, they cost more node CPU than the fire transaction itself. Here
every ``UPDATE`` of one server is hand-built text with bound parameters, and all of them go to the
server as one multi-statement on the raw asyncmy connection of one transaction, on the server's fire
pool like the fire transaction (:meth:`tjobs.stores.sql_direct.DirectPool.transaction`; SQLAlchemy's
engine only for a server URL without one), the transaction's ``COMMIT`` at the end of its last round
trip (a flush of one round trip, a run's start among them, is one round trip in all). Only identifiers
derived from the topology are put into the SQL text, so SQLite's form is the same text with ``?`` for
``%s`` (but for a run's start, below).

One ``UPDATE … WHERE (task_id, scheduled_at) IN (…) AND status IN (<the open statuses>)`` per shard table
(:func:`update_statements`), so a terminal flow is never changed again and a flow is never made up. An
outcome that starts a run (``running``) gets a one-row ``UPDATE`` of its own that lands only where its
attempt is still being delivered: a report, a cancel or a retry that reached the flow first is kept (a second
one-row ``UPDATE`` still records the send in the history where the flow is at that attempt). On MariaDB the
two are one ``UPDATE`` (:func:`_run_start`: each ``SET`` expression a ``CASE`` on the row as it was, under
the statement's own ``SIMULTANEOUS_ASSIGNMENT`` mode, MariaDB 10.3+), one statement a run less (issue 30);
SQLite and MySQL keep the two. A
column that every row of the statement gets the same value of is set to it; one whose values differ (an
outcome that made a send carries its flow's whole attempt history, whose start and duration are its own) is
set by ``CASE`` on the row's key, ``task_id`` alone when no two rows share a task. ``routes``,
``attempt_log``, ``answers`` and ``run`` keep the stored value where an outcome carries none (left out of
the ``SET``, or the ``CASE``'s ``ELSE``). An open outcome adds ``attempts <= n`` for its row, so an
outdated one never lowers the attempt count. A table with one flow in the flush (the usual case over
512 shards) takes a short way: no comparisons, its statement text cached. Shards and keys are sorted,
so two writers lock rows in the same order; on MariaDB each flows ``UPDATE`` finds its rows by the primary
key (:data:`BY_PRIMARY_KEY`), so a row is locked before its index entries, as the compensator's lease locks
it. The shard-map fence of the server's logical databases
heads the first round trip (:mod:`tjobs.stores.shard_fence`; SQLite has none). An outcome that sets a
fixed_delay task's next run (:class:`~tjobs.model.Reschedule`) adds one guarded ``UPDATE`` of its task
row after the flows' (no other outcome adds a statement). Figures:
docs/benchmarks.md, "The attempt history's cost".
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import FlowStatus, FlowUpdate
from tjobs.stores.flow_documents import answers_to_text, attempt_log_to_text, routes_to_text, run_to_text
from tjobs.stores.schema import clip_error
from tjobs.stores.sql_direct import committed_in_batch
from tjobs.stores.sql_layout import MULTI_STATEMENT_PARAMS, round_trips

if TYPE_CHECKING:
    from tjobs.stores.sql_layout import ShardTables

_OPEN_SQL = f"status IN ({', '.join(repr(s.value) for s in FlowStatus if not s.terminal)})"
# a run's start lands where its attempt is still being delivered (see memory._may_start_run): a report, a
# cancel, or a failed run's retry (pending with the attempt counted) that came first is kept
_RUN_START_SQL = (
    f"((status = '{FlowStatus.PENDING.value}' AND attempts < %s)"
    f" OR (status = '{FlowStatus.SENDING.value}' AND attempts <= %s))"
)

Key = tuple[int, int]  # (task_id, scheduled_at)
COLUMNS = (
    "status",
    "attempts",
    "next_attempt_at",
    "last_status_code",
    "last_error",
    "routes",
    "attempt_log",
    "answers",
    "run",
)
_KEPT = (False, False, False, False, False, True, True, True, True)  # routes .. run: None keeps it
_COLUMNS_GIVEN = {  # the columns a single row sets, by (routes, attempt_log, answers, run given)
    given: (*COLUMNS[:5], *(column for column, set_ in zip(COLUMNS[5:], given, strict=True) if set_))
    for given in itertools.product((True, False), repeat=4)
}
_SETS: dict[tuple[str, ...], str] = {}  # "a = %s, b = %s, " per column list (a handful of them)
_SEND_RECORD = frozenset(("last_status_code", "attempt_log", "answers"))  # what a run's start records of its send
# MariaDB: the SET clause's expressions see the row as it was, as in SQLite (and standard SQL), not as the
# assignments before them left it; for this statement only, the session's modes kept
_SIMULTANEOUS = "SET STATEMENT sql_mode = CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT') FOR "
_RUN_START_ONE_SQL: dict[tuple[str, tuple[str, ...]], str] = {}  # by table and columns set
_MARIADB_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)-MariaDB")
_SIMULTANEOUS_BY_VERSION: dict[str, bool] = {}
_ONE_ROW_SQL: dict[tuple[str, tuple[str, ...], bool, bool], str] = {}  # by table, columns, guards
_ONE_ROW_SQL_MAX = 16_384  # emptied when full: it never grows without bound
# MariaDB and MySQL: a flows UPDATE finds its rows by the primary key, as the compensator's lease does
# (:func:`tjobs.stores.sql.fire_path.lease_update`). Left to the optimizer, a large table's key list may be
# read through ``flows_TT_at`` (``scheduled_at``, then the key): that index's entry locked before the row,
# where a lease holds the row and then asks for the entry, closed a deadlock (1213) on one row.
BY_PRIMARY_KEY = " FORCE INDEX (PRIMARY)"
# One flow is named by two equalities, never by a one-element row list: MariaDB (10.11) locates the rows of
# ``(task_id, scheduled_at) IN ((%s, %s))`` in a single-table UPDATE through no index (a SELECT makes it a
# constant), so with the primary key forced it read every row of the table
# (tests/contract/test_flow_writes_by_key.py). Two keys or more are a range of the primary key.
ONE_KEY_SQL = "task_id = %s AND scheduled_at = %s"


def flow_keys_sql(count: int) -> str:
    """The condition naming ``count`` flows by key, their values bound in key order after it."""
    return ONE_KEY_SQL if count == 1 else f"(task_id, scheduled_at) IN ({', '.join(['(%s, %s)'] * count)})"


class ShardUpdate(NamedTuple):
    """The one ``UPDATE`` of one shard table: its rows' ``keys`` in order, whether ``task_id`` alone
    tells them apart (``by_task``), the ``columns`` every row gets the same one of ``values``, the
    columns set ``per_row`` (each row given one: its key and value; a routes or attempt_log row given
    none keeps its own), and the attempt-count guard: ``None`` (all outcomes terminal), one bound for
    every row (an ``int``), or each open row's own bound."""

    shard: int
    keys: tuple[Key, ...]
    by_task: bool
    columns: tuple[str, ...]
    values: tuple[Any, ...]
    per_row: tuple[tuple[str, tuple[tuple[Key, Any], ...]], ...]
    guard: int | tuple[tuple[Key, int], ...] | None


def _values(u: FlowUpdate) -> tuple[Any, ...]:
    return (
        u.status.value,
        u.attempts,
        u.next_attempt_at_ms,
        u.last_status_code,
        clip_error(u.last_error),
        routes_to_text(u.routes),
        attempt_log_to_text(u.attempt_log),
        answers_to_text(u.answers),
        run_to_text(u.run),
    )


def _one_row(u: FlowUpdate) -> tuple[tuple[str, ...], list[Any]]:
    """The columns a table's only flow in a flush sets and their values (routes, attempt_log and answers
    only when given)."""
    values = _values(u)
    columns = _COLUMNS_GIVEN[values[5] is not None, values[6] is not None, values[7] is not None, values[8] is not None]
    if len(columns) == len(COLUMNS):
        return columns, [*values]
    return columns, [*values[:5], *[v for v in values[5:] if v is not None]]


def _plan(shard: int, updates: Sequence[FlowUpdate]) -> ShardUpdate:
    if len(updates) == 1:  # one flow in the table: nothing to compare
        u = updates[0]
        columns, values = _one_row(u)
        bound = None if u.status.terminal else u.attempts
        return ShardUpdate(shard, ((u.task_id, u.scheduled_at_ms),), True, columns, tuple(values), (), bound)
    rows: dict[Key, tuple[Any, ...]] = {}
    open_rows: dict[Key, int] = {}
    for u in updates:
        key = (u.task_id, u.scheduled_at_ms)
        if u.status.terminal:
            open_rows.pop(key, None)
        else:
            open_rows[key] = u.attempts
        rows[key] = _values(u)
    keys = tuple(sorted(rows))
    ordered = [rows[key] for key in keys]
    shared: list[str] = []
    shared_values: list[Any] = []
    per_row: list[tuple[str, tuple[tuple[Key, Any], ...]]] = []
    for column, kept, given in zip(COLUMNS, _KEPT, zip(*ordered, strict=True), strict=True):
        first = given[0]
        if given.count(first) == len(given):  # every row the same
            if not (kept and first is None):  # None for every row: the column is left as it is
                shared.append(column)
                shared_values.append(first)
        elif kept:
            per_row.append((column, tuple([(k, v) for k, v in zip(keys, given, strict=True) if v is not None])))
        else:
            per_row.append((column, tuple(zip(keys, given, strict=True))))
    bounds = tuple([(key, open_rows[key]) for key in keys if key in open_rows])
    guard: int | tuple[tuple[Key, int], ...] | None = None
    if bounds:
        same = bounds[0][1]
        guard = same if len(bounds) == len(keys) and all([n == same for _, n in bounds]) else bounds
    by_task = len({task_id for task_id, _ in keys}) == len(keys)
    return ShardUpdate(shard, keys, by_task, tuple(shared), tuple(shared_values), tuple(per_row), guard)


def _case(plan: ShardUpdate, pairs: Sequence[tuple[Key, Any]], otherwise: str, params: list[Any]) -> str:
    """``CASE`` on the row's key giving each key's value, ``otherwise`` for the rest; params appended."""
    if plan.by_task:
        for (task_id, _), value in pairs:
            params.append(task_id)
            params.append(value)
        whens = " ".join(["WHEN %s THEN %s"] * len(pairs))
        return f"CASE task_id {whens} ELSE {otherwise} END"
    for (task_id, scheduled_at_ms), value in pairs:
        params.append(task_id)
        params.append(scheduled_at_ms)
        params.append(value)
    whens = " ".join(["WHEN task_id = %s AND scheduled_at = %s THEN %s"] * len(pairs))
    return f"CASE {whens} ELSE {otherwise} END"


def _sets(columns: tuple[str, ...]) -> str:
    text = _SETS.get(columns)
    if text is None:
        text = _SETS[columns] = "".join([f"{column} = %s, " for column in columns])
    return text


def _one_row_sql(table: str, columns: tuple[str, ...], guarded: bool, starts_run: bool = False) -> str:
    """The ``UPDATE`` of a table's only flow in a flush, by table, columns set and guards (cached): a
    run's start lands on a deliverable flow only."""
    key = (table, columns, guarded, starts_run)
    sql = _ONE_ROW_SQL.get(key)
    if sql is None:
        if len(_ONE_ROW_SQL) >= _ONE_ROW_SQL_MAX:
            _ONE_ROW_SQL.clear()
        sql = (
            f"UPDATE {table} SET {_sets(columns)}updated_at = %s "
            f"WHERE {ONE_KEY_SQL} AND {_RUN_START_SQL if starts_run else _OPEN_SQL}"
        )
        if guarded and not starts_run:
            sql += " AND attempts <= %s"
        _ONE_ROW_SQL[key] = sql
    return sql


def _send_record(table: str, u: FlowUpdate) -> tuple[str, list[Any]]:
    """What a run's start records of its send (the status code, attempt history, answers), where the flow
    is still at its attempt: kept also when a report or a cancel overtook the start (its status, run
    and deadline are theirs), so the send that started the run is in the history either way."""
    values = _values(u)
    sets = ["last_status_code = %s"]
    params: list[Any] = [values[3]]
    for column, value in (("attempt_log", values[6]), ("answers", values[7])):
        if value is not None:
            sets.append(f"{column} = %s")
            params.append(value)
    params += [u.task_id, u.scheduled_at_ms, u.attempts]
    return f"UPDATE {table} SET {', '.join(sets)} WHERE {ONE_KEY_SQL} AND attempts = %s", params


def _run_start(table: str, u: FlowUpdate, now_ms: int) -> tuple[str, list[Any]]:
    """MariaDB: a run's start and its send's record (:func:`_one_row_sql` with ``starts_run``, then
    :func:`_send_record`) as one ``UPDATE`` under ``SIMULTANEOUS_ASSIGNMENT``. It passes the flow the one
    or the other passes (still being delivered, or at the start's attempt); the send's record is set on
    both, the rest only where the run starts (each ``CASE`` tests the row as it was, so a status or an
    attempt count set before it in the clause does not count)."""
    columns, values = _one_row(u)
    key = (table, columns)
    sql = _RUN_START_ONE_SQL.get(key)
    if sql is None:
        if len(_RUN_START_ONE_SQL) >= _ONE_ROW_SQL_MAX:
            _RUN_START_ONE_SQL.clear()
        sets = [
            f"{column} = %s"
            if column in _SEND_RECORD
            else f"{column} = CASE WHEN {_RUN_START_SQL} THEN %s ELSE {column} END"
            for column in (*columns, "updated_at")
        ]
        sql = _RUN_START_ONE_SQL[key] = (
            f"{_SIMULTANEOUS}UPDATE {table} SET {', '.join(sets)} "
            f"WHERE {ONE_KEY_SQL} AND ({_RUN_START_SQL} OR attempts = %s)"
        )
    n = u.attempts
    params: list[Any] = []
    for column, value in zip((*columns, "updated_at"), (*values, now_ms), strict=True):
        if column not in _SEND_RECORD:
            params.append(n)
            params.append(n)
        params.append(value)
    params += [u.task_id, u.scheduled_at_ms, n, n, n]
    return sql, params


def takes_simultaneous_assignment(server_version: str) -> bool:
    """Whether the server that greeted a connection with ``server_version`` runs :func:`_run_start`'s
    ``SET STATEMENT … SIMULTANEOUS_ASSIGNMENT``: MariaDB 10.3.5+ (whose greeting may start ``5.5.5-``);
    MySQL has neither, and takes a run's start as two statements."""
    found = _SIMULTANEOUS_BY_VERSION.get(server_version)
    if found is None:
        match = _MARIADB_VERSION.search(server_version)
        found = match is not None and (int(match[1]), int(match[2]), int(match[3])) >= (10, 3, 5)
        if len(_SIMULTANEOUS_BY_VERSION) < 64:
            _SIMULTANEOUS_BY_VERSION[server_version] = found
    return found


def update_statements(
    by_shard: dict[int, list[FlowUpdate]],
    shards: Sequence[ShardTables],
    now_ms: int,
    *,
    simultaneous: bool = False,
    by_primary_key: bool = False,
) -> list[tuple[str, list[Any]]]:
    """One ``UPDATE`` per shard table, in shard and key order. ``simultaneous`` (MariaDB 10.3+,
    :func:`takes_simultaneous_assignment`): a run's start is one ``UPDATE`` (:func:`_run_start`), not two.
    ``by_primary_key`` (MariaDB and MySQL): each flows ``UPDATE`` finds its rows by the primary key
    (:data:`BY_PRIMARY_KEY`)."""
    statements: list[tuple[str, list[Any]]] = []
    for shard in sorted(by_shard):
        updates = by_shard[shard]
        flows = shards[shard].flows_sql + BY_PRIMARY_KEY if by_primary_key else shards[shard].flows_sql
        starts = [u for u in updates if u.status is FlowStatus.RUNNING]
        if starts:  # each on its own, guarded apart (rare: a run's start)
            updates = [u for u in updates if u.status is not FlowStatus.RUNNING]
            for u in sorted(starts, key=lambda u: (u.task_id, u.scheduled_at_ms)):
                if simultaneous:
                    statements.append(_run_start(flows, u, now_ms))
                    continue
                columns, params = _one_row(u)
                params += [now_ms, u.task_id, u.scheduled_at_ms, u.attempts, u.attempts]
                statements.append((_one_row_sql(flows, columns, True, True), params))
                statements.append(_send_record(flows, u))
            if not updates:
                continue
        if len(updates) == 1:  # the usual case over many shards: the plan's one-row case, inline
            u = updates[0]
            columns, params = _one_row(u)
            params.append(now_ms)
            params.append(u.task_id)
            params.append(u.scheduled_at_ms)
            guarded = not u.status.terminal
            if guarded:
                params.append(u.attempts)
            statements.append((_one_row_sql(flows, columns, guarded), params))
            continue
        plan = _plan(shard, updates)
        params = [*plan.values]
        sets = _sets(plan.columns)
        for column, pairs in plan.per_row:  # a row given no value (routes, attempt_log, answers) keeps its own
            sets += f"{column} = {_case(plan, pairs, column, params)}, "
        params.append(now_ms)
        for task_id, scheduled_at_ms in plan.keys:
            params.append(task_id)
            params.append(scheduled_at_ms)
        sql = f"UPDATE {flows} SET {sets}updated_at = %s WHERE {flow_keys_sql(len(plan.keys))} AND {_OPEN_SQL}"
        if isinstance(plan.guard, int):
            sql += " AND attempts <= %s"
            params.append(plan.guard)
        elif plan.guard is not None:
            sql += f" AND attempts <= {_case(plan, plan.guard, 'attempts', params)}"
        statements.append((sql, params))
    for shard in sorted(by_shard):  # fixed_delay tasks' next runs, in the outcomes' own transaction
        # by task id alone (two flows of one task may end in one flush; a Reschedule has no order)
        moves = sorted(
            ((u.task_id, u.reschedule) for u in by_shard[shard] if u.reschedule is not None), key=lambda m: m[0]
        )
        for task_id, moved in moves:
            statements.append(
                (
                    f"UPDATE {shards[shard].tasks_sql} SET next_run_at = %s, updated_at = %s "
                    f"WHERE id = %s AND status = 'active' AND next_run_at = %s AND version = %s",
                    [moved.next_run_at_ms, now_ms, task_id, moved.parked_at_ms, moved.version],
                )
            )
    return statements


async def write_flow_updates(
    conn: Any,
    by_shard: dict[int, list[FlowUpdate]],
    shards: Sequence[ShardTables],
    now_ms: int,
    fence: tuple[str, list[int]] | None = None,
    *,
    commit: bool = False,
) -> None:
    """Run the updates on ``conn`` (a MariaDB transaction: a raw asyncmy connection of a fire pool,
    :meth:`tjobs.stores.sql_direct.DirectPool.transaction`, or an engine connection) in as few round
    trips as the size allows; ``fence`` (:func:`tjobs.stores.shard_fence.fence_statement`) heads the
    first round trip. ``commit`` (a raw connection of ``DirectPool.transaction(commit=False)``): the last
    round trip ends with the ``COMMIT``, run only where every statement before it passed (a multi-statement
    stops at its first error, and the pool rolls the transaction back), so a flush of one round trip, a
    run's start among them, is one round trip in all (issue 30: the ``COMMIT`` was one more)."""
    if isinstance(conn, AsyncConnection):
        conn = (await conn.get_raw_connection()).driver_connection
    cursor = conn.cursor()
    simultaneous = takes_simultaneous_assignment(conn.get_server_info())
    statements = update_statements(by_shard, shards, now_ms, simultaneous=simultaneous, by_primary_key=True)
    if fence is not None:
        statements.insert(0, (fence[0], list(fence[1])))
    chunks = _chunks(statements)
    if commit:
        last_sql, last_params = chunks[-1] if chunks else ("", ())
        chunks[-1:] = [(f"{last_sql}; COMMIT" if last_sql else "COMMIT", last_params)]
    try:
        for sql, params in chunks:
            await cursor.execute(sql, params)
            while await cursor.nextset():
                pass
        if commit:
            committed_in_batch(conn)
    finally:
        await cursor.close()


async def run_flow_updates(
    conn: AsyncConnection, by_shard: dict[int, list[FlowUpdate]], shards: Sequence[ShardTables], now_ms: int
) -> None:
    """SQLite: the statements of :func:`update_statements`, each on its own (sqlite3 runs one statement
    per call) with its ``?`` mark, on ``conn`` (a write transaction of the file's engine)."""
    for sql, params in update_statements(by_shard, shards, now_ms):
        await conn.exec_driver_sql(sql.replace("%s", "?"), tuple(params))


def _chunks(statements: Sequence[tuple[str, list[Any]]]) -> list[tuple[str, tuple[Any, ...]]]:
    return [
        ("; ".join(sql for sql, _ in group), tuple(value for _, values in group for value in values))
        for group in round_trips(statements, lambda statement: statement[1], MULTI_STATEMENT_PARAMS)
    ]
