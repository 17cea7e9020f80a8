"""Delivery outcomes written in bulk on MariaDB: one transaction, one round trip per server.

The deliverer flushes hundreds of outcomes at a time, spread over as many shards as there are flows
(a 512-shard topology puts nearly every flow in its own table). Written as one SQLAlchemy ``UPDATE``
per shard and per distinct outcome, each compiled afresh (the ``IN`` list and the schema change every
time) and sent on its own round trip, they cost more node CPU than the fire transaction itself. Here
every ``UPDATE`` of one server is hand-built text with bound parameters, and all of them go to the
server as one multi-statement on the raw asyncmy connection of one transaction (like
:mod:`tjobs.stores.sql_fire`). Only identifiers derived from the topology are put into the SQL text.

One ``UPDATE … WHERE (task_id, scheduled_at) IN (…) AND status IN ('pending', 'sending')`` per shard
table (:func:`plan_updates`, shared with the generic path of :mod:`tjobs.stores.sqlalchemy`), so a
terminal flow is never changed again and a flow is never made up. A column that every row of the
statement gets the same value of is set to it; one whose values differ (an outcome that made a send
carries its flow's whole attempt history, whose start and duration are its own) is set by ``CASE`` on
the row's key, ``task_id`` alone when no two rows share a task. ``routes`` and ``attempt_log`` keep the
stored value where an outcome carries none (``COALESCE``). An open outcome adds ``attempts <= n`` for
its row, so an outdated one never lowers the attempt count. Shards and keys are sorted, so two writers
lock rows in the same order. The shard-map fence of the server's logical databases heads the first
round trip (:mod:`tjobs.stores.shard_fence`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import FlowStatus, FlowUpdate
from tjobs.stores.schema import attempt_log_to_text, clip_error, routes_to_text
from tjobs.stores.sql_layout import MULTI_STATEMENT_PARAMS, round_trips

if TYPE_CHECKING:
    from tjobs.stores.sql_layout import ShardTables

_OPEN_SQL = f"status IN ('{FlowStatus.PENDING.value}', '{FlowStatus.SENDING.value}')"

Key = tuple[int, int]  # (task_id, scheduled_at)
COLUMNS = ("status", "attempts", "next_attempt_at", "last_status_code", "last_error", "routes", "attempt_log")
KEPT_WHEN_NONE = frozenset({"routes", "attempt_log"})  # an outcome without one leaves the stored value


@dataclass(frozen=True, slots=True)
class Assignment:
    """One column of one shard's ``UPDATE``: every row gets ``value`` (``per_row`` is None), or each
    row in ``per_row`` its own; a :data:`KEPT_WHEN_NONE` column leaves the stored value of a row it
    gives no value to."""

    column: str
    value: Any
    per_row: tuple[tuple[Key, Any], ...] | None


@dataclass(frozen=True, slots=True)
class ShardUpdate:
    """The one ``UPDATE`` of one shard table: its rows' ``keys`` in order, whether ``task_id`` alone
    tells them apart (``by_task``), the columns it sets, and the attempt-count guard: ``None`` (all
    outcomes terminal), one bound for every row (an ``int``), or each open row's own bound."""

    shard: int
    keys: tuple[Key, ...]
    by_task: bool
    assignments: tuple[Assignment, ...]
    guard: int | tuple[tuple[Key, int], ...] | None


def plan_updates(by_shard: dict[int, list[FlowUpdate]]) -> list[ShardUpdate]:
    """One :class:`ShardUpdate` per shard, in shard order (a later outcome of the same flow wins)."""
    plans: list[ShardUpdate] = []
    for shard in sorted(by_shard):
        rows: dict[Key, tuple[Any, ...]] = {}
        open_rows: dict[Key, int] = {}
        for u in by_shard[shard]:
            key = (u.task_id, u.scheduled_at_ms)
            if u.status.terminal:
                open_rows.pop(key, None)
            else:
                open_rows[key] = u.attempts
            rows[key] = (
                u.status.value,
                u.attempts,
                u.next_attempt_at_ms,
                u.last_status_code,
                clip_error(u.last_error),
                routes_to_text(u.routes),
                attempt_log_to_text(u.attempt_log),
            )
        if not rows:
            continue
        keys = tuple(sorted(rows))
        ordered = [rows[key] for key in keys]
        assignments: list[Assignment] = []
        for index, column in enumerate(COLUMNS):
            first = ordered[0][index]
            kept = column in KEPT_WHEN_NONE
            if all(values[index] == first for values in ordered):
                if not (kept and first is None):  # None for every row: the column is left as it is
                    assignments.append(Assignment(column, first, None))
                continue
            per_row = tuple(
                (key, values[index])
                for key, values in zip(keys, ordered, strict=True)
                if not (kept and values[index] is None)
            )
            assignments.append(Assignment(column, None, per_row))
        bounds = tuple((key, open_rows[key]) for key in keys if key in open_rows)
        guard: int | tuple[tuple[Key, int], ...] | None = None
        if bounds:
            same = bounds[0][1]
            guard = same if len(bounds) == len(keys) and all(n == same for _, n in bounds) else bounds
        by_task = len({task_id for task_id, _ in keys}) == len(keys)
        plans.append(ShardUpdate(shard, keys, by_task, tuple(assignments), guard))
    return plans


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


def update_statements(
    by_shard: dict[int, list[FlowUpdate]], shards: Sequence[ShardTables], now_ms: int
) -> list[tuple[str, list[Any]]]:
    """One ``UPDATE`` per shard table, in shard and key order."""
    statements: list[tuple[str, list[Any]]] = []
    for plan in plan_updates(by_shard):
        params: list[Any] = []
        sets: list[str] = []
        for a in plan.assignments:
            if a.per_row is None:
                sets.append(f"{a.column} = %s")
                params.append(a.value)
            else:  # a row given no value (routes, attempt_log) keeps its own: ELSE the column
                sets.append(f"{a.column} = {_case(plan, a.per_row, a.column, params)}")
        sets.append("updated_at = %s")
        params.append(now_ms)
        for task_id, scheduled_at_ms in plan.keys:
            params.append(task_id)
            params.append(scheduled_at_ms)
        sql = (
            f"UPDATE {shards[plan.shard].flows_sql} SET {', '.join(sets)} "
            f"WHERE (task_id, scheduled_at) IN ({', '.join(['(%s, %s)'] * len(plan.keys))}) AND {_OPEN_SQL}"
        )
        if isinstance(plan.guard, int):
            sql += " AND attempts <= %s"
            params.append(plan.guard)
        elif plan.guard is not None:
            sql += f" AND attempts <= {_case(plan, plan.guard, 'attempts', params)}"
        statements.append((sql, params))
    return statements


async def write_flow_updates(
    conn: AsyncConnection,
    by_shard: dict[int, list[FlowUpdate]],
    shards: Sequence[ShardTables],
    now_ms: int,
    fence: tuple[str, list[int]] | None = None,
) -> None:
    """Run the updates on ``conn`` (a MariaDB transaction) in as few round trips as the size allows;
    ``fence`` (:func:`tjobs.stores.shard_fence.fence_statement`) heads the first round trip."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    cursor = driver.cursor()
    statements = update_statements(by_shard, shards, now_ms)
    if fence is not None:
        statements.insert(0, (fence[0], list(fence[1])))
    try:
        for sql, params in _chunks(statements):
            await cursor.execute(sql, params)
            while await cursor.nextset():
                pass
    finally:
        await cursor.close()


def _chunks(statements: Sequence[tuple[str, list[Any]]]) -> list[tuple[str, tuple[Any, ...]]]:
    return [
        ("; ".join(sql for sql, _ in group), tuple(value for _, values in group for value in values))
        for group in round_trips(statements, lambda statement: statement[1], MULTI_STATEMENT_PARAMS)
    ]
