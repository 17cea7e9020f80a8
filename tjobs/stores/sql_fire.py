"""The fire transaction (invariant 1) on SQL: lock, compare-and-set, plan, insert flows, advance.

One :class:`FireTransaction` covers the intents of one engine: a MariaDB server (a transaction may span
the logical databases of one server, never two servers) or one SQLite file. Inside it:

1. the task rows are locked and read: one ``SELECT … FOR UPDATE`` for all touched tables (a
   ``UNION ALL`` of one part per table, in shard and id order so concurrent batches lock in the same
   order); on SQLite ``BEGIN IMMEDIATE`` already holds the file's write lock;
2. the CAS is checked in Python and the planner runs for the rows that match;
3. flows are inserted with one executemany per flows table, ignoring primary-key duplicates; if fewer
   rows went in than were sent, the transaction is rolled back and redone inserting row by row, so
   the outcome reports exactly the flows this transaction wrote (invariant 2);
4. tasks advance with one ``UPDATE … SET col = CASE id … END … WHERE id IN (…)`` per tasks table.

The statements are hand-built text with bound parameters: their shape changes with every batch (the
tables touched, the IN-list lengths, the CASE arms), so SQLAlchemy's statement cache cannot help, and
only identifiers derived from the topology are ever put into the SQL text. A deadlock is retried once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import FireIntent, FireOutcome, Flow, Task, TaskStatus
from tjobs.stores.base import FirePlanner
from tjobs.stores.schema import FLOW_COLUMNS, TASK_COLUMNS, clip_error, task_from_row
from tjobs.stores.sql_layout import DEADLOCK_ERRNOS, MYSQL, mysql_errno

if TYPE_CHECKING:
    from tjobs.stores.sql_layout import ShardTables

MAX_PARAMS = 8000  # per statement; far below MySQL's 65535 and SQLite's 32766
_TASK_SELECT = ", ".join(TASK_COLUMNS)
_FLOW_INSERT_COLUMNS = ", ".join(FLOW_COLUMNS)


class _DuplicateFlows(Exception):
    """Some flow of the batch already existed: redo the transaction inserting row by row."""


class FireTransaction:
    def __init__(
        self,
        dialect: str,
        intents: Sequence[FireIntent],
        items: list[tuple[int, ShardTables]],
        now_ms: int,
        planner: FirePlanner,
    ) -> None:
        self.mysql = dialect == MYSQL
        self.mark = "%s" if self.mysql else "?"
        self.intents = intents
        self.items = items
        self.now_ms = now_ms
        self.planner = planner
        self.outcomes: dict[int, FireOutcome] = {}
        self.shards: dict[int, ShardTables] = {home.shard: home for _, home in items}

    async def run(self, begin: Callable[[], AbstractAsyncContextManager[AsyncConnection]]) -> None:
        careful = False
        deadlocks = 0
        while True:
            try:
                async with begin() as conn:
                    outcomes = await self._once(conn, careful)
            except _DuplicateFlows:
                if careful:  # cannot happen: careful mode counts every row
                    raise RuntimeError("duplicate flows in careful mode") from None
                careful = True
                continue
            except sa_exc.OperationalError as error:
                if mysql_errno(error) in DEADLOCK_ERRNOS and deadlocks == 0:
                    deadlocks += 1
                    continue
                raise
            self.outcomes = outcomes
            return

    async def _once(self, conn: AsyncConnection, careful: bool) -> dict[int, FireOutcome]:
        ids_by_shard: dict[int, set[int]] = defaultdict(set)
        for index, home in self.items:
            ids_by_shard[home.shard].add(self.intents[index].task_id)
        state = await self._lock(conn, ids_by_shard)

        outcomes: dict[int, FireOutcome] = {}
        advanced: dict[int, dict[int, Task]] = defaultdict(dict)  # shard -> task id -> new row
        new_flows: dict[int, list[tuple[int, Flow]]] = defaultdict(list)  # shard -> (intent index, flow)
        for index, home in sorted(self.items, key=lambda item: item[0]):
            intent = self.intents[index]
            task = state.get(intent.task_id)
            if (
                task is None
                or task.status is not TaskStatus.ACTIVE
                or task.next_run_at_ms != intent.scheduled_at_ms
                or task.version != intent.version
            ):
                outcomes[index] = FireOutcome(intent, None, [])
                continue
            plan = self.planner(replace(task), intent, self.now_ms)
            if plan is None:
                outcomes[index] = FireOutcome(intent, None, [])
                continue
            after = replace(
                task,
                next_run_at_ms=plan.next_run_at_ms,
                status=plan.status,
                version=task.version + 1,
                fire_count=task.fire_count + plan.fires_added,
                updated_at_ms=self.now_ms,
            )
            state[task.id] = after
            advanced[home.shard][task.id] = after
            flows = [
                Flow(task.id, new.scheduled_at_ms, task.app_id, new.kind, new.status, new.attempts,
                     new.next_attempt_at_ms, self.now_ms, self.now_ms, new.missed)
                for new in plan.flows
            ]
            new_flows[home.shard].extend((index, flow) for flow in flows)
            outcomes[index] = FireOutcome(intent, replace(after), flows)

        for shard in sorted(new_flows):
            kept = await self._insert_flows(conn, self.shards[shard], new_flows[shard], careful)
            if kept is not None:
                for index in {index for index, _ in new_flows[shard]}:
                    outcomes[index].flows = [f for f in outcomes[index].flows if id(f) in kept]
        for shard in sorted(advanced):
            await self._advance(conn, self.shards[shard], list(advanced[shard].values()))
        return outcomes

    async def _lock(self, conn: AsyncConnection, ids_by_shard: dict[int, set[int]]) -> dict[int, Task]:
        lock = " FOR UPDATE" if self.mysql else ""
        parts: list[tuple[str, list[int]]] = []
        for shard in sorted(ids_by_shard):
            ids = sorted(ids_by_shard[shard])
            for start in range(0, len(ids), MAX_PARAMS):
                chunk = ids[start:start + MAX_PARAMS]
                marks = ", ".join([self.mark] * len(chunk))
                sql = f"SELECT {_TASK_SELECT} FROM {self.shards[shard].tasks_sql} WHERE id IN ({marks}){lock}"
                parts.append((sql, chunk))
        state: dict[int, Task] = {}
        statement: list[str] = []
        params: list[int] = []

        async def flush() -> None:
            if not statement:
                return
            if len(statement) == 1:
                sql = statement[0]
            elif self.mysql:
                sql = " UNION ALL ".join(f"({part})" for part in statement)
            else:
                sql = " UNION ALL ".join(statement)
            result = await conn.exec_driver_sql(sql, tuple(params))
            for row in result.mappings():
                task = task_from_row(row)
                state[task.id] = task
            statement.clear()
            params.clear()

        for sql, chunk in parts:
            if params and len(params) + len(chunk) > MAX_PARAMS:
                await flush()
            statement.append(sql)
            params.extend(chunk)
        await flush()
        return state

    async def _insert_flows(
        self, conn: AsyncConnection, home: ShardTables, pairs: list[tuple[int, Flow]], careful: bool
    ) -> set[int] | None:
        """Insert the flows; ``None`` if all went in, else the ``id()`` of those that did."""
        marks = ", ".join([self.mark] * len(FLOW_COLUMNS))
        if self.mysql:
            sql = f"INSERT IGNORE INTO {home.flows_sql} ({_FLOW_INSERT_COLUMNS}) VALUES ({marks})"
        else:
            sql = (f"INSERT INTO {home.flows_sql} ({_FLOW_INSERT_COLUMNS}) VALUES ({marks}) "
                   "ON CONFLICT (task_id, scheduled_at) DO NOTHING")
        rows = [_flow_values(flow) for _, flow in pairs]
        if not careful:
            result = await conn.exec_driver_sql(sql, rows if len(rows) > 1 else rows[0])
            if result.rowcount != len(rows):
                raise _DuplicateFlows()
            return None
        kept: set[int] = set()
        for (_, flow), row in zip(pairs, rows, strict=True):
            result = await conn.exec_driver_sql(sql, row)
            if result.rowcount == 1:
                kept.add(id(flow))
        return kept

    async def _advance(self, conn: AsyncConnection, home: ShardTables, tasks: list[Task]) -> None:
        step = MAX_PARAMS // 10
        for start in range(0, len(tasks), step):
            chunk = sorted(tasks[start:start + step], key=lambda t: t.id)
            arms = " ".join(["WHEN " + self.mark + " THEN " + self.mark] * len(chunk))
            marks = ", ".join([self.mark] * len(chunk))
            sql = (
                f"UPDATE {home.tasks_sql} SET "
                f"next_run_at = CASE id {arms} END, status = CASE id {arms} END, "
                f"version = CASE id {arms} END, fire_count = CASE id {arms} END, "
                f"updated_at = {self.mark} WHERE id IN ({marks})"
            )
            params: list[Any] = []
            for column in ("next_run_at_ms", "status", "version", "fire_count"):
                for task in chunk:
                    value = getattr(task, column)
                    params.extend((task.id, value.value if column == "status" else value))
            params.append(self.now_ms)
            params.extend(task.id for task in chunk)
            result = await conn.exec_driver_sql(sql, tuple(params))
            if result.rowcount != len(chunk):
                raise RuntimeError(f"fire transaction advanced {result.rowcount} of {len(chunk)} locked rows")


def _flow_values(flow: Flow) -> tuple[Any, ...]:
    return (
        flow.task_id, flow.scheduled_at_ms, flow.app_id, flow.kind.value, flow.status.value, flow.attempts,
        flow.next_attempt_at_ms, flow.missed, flow.last_status_code, clip_error(flow.last_error),
        flow.created_at_ms, flow.updated_at_ms,
    )
