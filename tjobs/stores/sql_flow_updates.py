"""Delivery outcomes written in bulk on MariaDB: one transaction, one round trip per server.

The deliverer flushes hundreds of outcomes at a time, spread over as many shards as there are flows
(a 512-shard topology puts nearly every flow in its own table). Written as one SQLAlchemy ``UPDATE``
per shard and per distinct outcome, each compiled afresh (the ``IN`` list and the schema change every
time) and sent on its own round trip, they cost more node CPU than the fire transaction itself. Here
every ``UPDATE`` of one server is hand-built text with bound parameters, and all of them go to the
server as one multi-statement on the raw asyncmy connection of one transaction (like
:mod:`tjobs.stores.sql_fire`). Only identifiers derived from the topology are put into the SQL text.

The statements are those of the generic path: per shard and per distinct ``(status, attempts,
next_attempt_at, last_status_code, last_error, routes, attempt_log)``, ``UPDATE … WHERE (task_id,
scheduled_at) IN (…) AND status IN ('pending', 'sending')``, so a terminal flow is never changed again,
plus ``AND attempts <= …`` for an open outcome, so an outdated one never lowers the attempt count. An
outcome that made a send carries its flow's whole attempt history (start and duration differ per flow),
so such outcomes share no statement: one short ``UPDATE`` per flow, still in the same multi-statement
round trips. Shards and keys are sorted, so two writers lock rows in the same order. The shard-map
fence of the server's logical databases heads the first round trip (:mod:`tjobs.stores.shard_fence`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import FlowStatus, FlowUpdate
from tjobs.stores.schema import attempt_log_to_text, clip_error, routes_to_text
from tjobs.stores.sql_layout import MULTI_STATEMENT_PARAMS, round_trips

if TYPE_CHECKING:
    from tjobs.stores.sql_layout import ShardTables

_OPEN_SQL = f"status IN ('{FlowStatus.PENDING.value}', '{FlowStatus.SENDING.value}')"

Values = tuple[Any, ...]  # status, attempts, next_attempt_at, last_status_code, last_error, routes, attempt_log


def update_statements(
    by_shard: dict[int, list[FlowUpdate]], shards: Sequence[ShardTables], now_ms: int
) -> list[tuple[str, list[Any]]]:
    """One ``UPDATE`` per shard table and distinct outcome, in shard and key order."""
    statements: list[tuple[str, list[Any]]] = []
    for shard in sorted(by_shard):
        groups: dict[Values, list[tuple[int, int]]] = defaultdict(list)
        for u in by_shard[shard]:
            values = (
                u.status.value,
                u.attempts,
                u.next_attempt_at_ms,
                u.last_status_code,
                clip_error(u.last_error),
                routes_to_text(u.routes),
                attempt_log_to_text(u.attempt_log),
            )
            groups[values].append((u.task_id, u.scheduled_at_ms))
        table = shards[shard].flows_sql
        for values, keys in groups.items():
            keys.sort()
            open_outcome = not FlowStatus(values[0]).terminal
            sql = (
                f"UPDATE {table} SET status = %s, attempts = %s, next_attempt_at = %s, "
                f"last_status_code = %s, last_error = %s, routes = COALESCE(%s, routes), "
                f"attempt_log = COALESCE(%s, attempt_log), updated_at = %s "
                f"WHERE (task_id, scheduled_at) IN ({', '.join(['(%s, %s)'] * len(keys))}) AND {_OPEN_SQL}"
                + (" AND attempts <= %s" if open_outcome else "")
            )
            params: list[Any] = [*values, now_ms]
            for task_id, scheduled_at_ms in keys:
                params.append(task_id)
                params.append(scheduled_at_ms)
            if open_outcome:
                params.append(values[1])
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
