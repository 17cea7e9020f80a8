"""The fire transaction on SQL: lock, compare-and-set, plan, insert flows, advance (invariant 1, docs/design.md).

One :class:`FireTransaction` covers the intents of one engine: a MariaDB server (a transaction may span
the logical databases of one server, never two servers) or one SQLite file. Inside it:

1. the task rows are locked and read: one ``SELECT … FOR UPDATE`` for all touched tables (a
   ``UNION ALL`` of one part per table, in shard and id order so concurrent batches lock in the same
   order); on SQLite ``BEGIN IMMEDIATE`` already holds the file's write lock;
2. the CAS is checked in Python and the planner runs for the rows that match;
3. flows are inserted with one executemany per flows table, ignoring primary-key duplicates; if fewer
   rows went in than were sent, the transaction is rolled back and redone inserting row by row, so
   the outcome reports exactly the flows this transaction wrote (invariant 2, docs/design.md);
4. tasks advance with one ``UPDATE … SET col = CASE id … END … WHERE id IN (…)`` per tasks table, and the
   tasks it completed change their counts with one upsert per logical database
   (:mod:`tjobs.stores.sql_task_counts`; none when every task stays active);
5. the node's fence (``may_commit``) is asked once more, and only then does the transaction commit.

On a fire pool (``counts_at_commit``) the count upserts are sent last, with the ``COMMIT``, once the
fence has said yes. A one-shot fire moves its table's (app, ``active``) and (app, ``completed``) count
rows, and a server's committers run side by side: sent with the other writes, those rows stayed locked
across the node's reply and its fence check until the ``COMMIT``, and the transactions beside queued on
them (docs/benchmarks.md, "Count rows"); now they are locked only while the server runs that last round
trip. Elsewhere (SQLite: one writer; an engine's ``begin()``, which commits itself) they go with the
other writes.

On MariaDB, a transaction that writes also passes the shard-map epoch fence of every logical database
it touches (:mod:`tjobs.stores.shard_fence`): one more statement at the head of the round trip that
carries the writes (step 3-4), so it costs no round trip; a fenced database fails the transaction with
error 1242 and nothing is written.

The statements are hand-built text with bound parameters: their shape changes with every batch (the
tables touched, the IN-list lengths, the CASE arms), so SQLAlchemy's statement cache cannot help, and
only identifiers derived from the topology are ever put into the SQL text. A deadlock is retried once.

Where it runs: on MariaDB, on a connection of the server's fire pool, a raw asyncmy connection whose
transaction :meth:`tjobs.stores.sql_direct.DirectPool.transaction` owns (committed when the block exits,
rolled back or the connection dropped otherwise), without SQLAlchemy's engine around it; on a server URL
without a fire pool (options :mod:`tjobs.stores.sql_direct` does not translate), in an engine
connection's ``begin()``, its statements on the driver connection beneath. On SQLite, in an engine
connection's ``begin()`` (``BEGIN IMMEDIATE``) through SQLAlchemy's driver-level API.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.errors import Fenced
from tjobs.model import DeliveryMode, FireIntent, FireOutcome, Flow, MisfirePolicy, Task, TaskStatus
from tjobs.specs import callback_from_text, schedule_from_text
from tjobs.stores.base import FirePlanner
from tjobs.stores.schema import FLOW_COLUMNS, TASK_COLUMNS, children_from_text, clip_error
from tjobs.stores.shard_fence import fence_statement
from tjobs.stores.sql_direct import committed_in_batch
from tjobs.stores.sql_layout import DEADLOCK_ERRNOS, MYSQL, SQLITE, mysql_errno, round_trips
from tjobs.stores.sql_task_counts import CountDeltas

if TYPE_CHECKING:
    from tjobs.stores.sql_layout import ShardTables

MAX_PARAMS = 8000  # per statement; far below MySQL's 65535 and SQLite's 32766
_TASK_SELECT = ", ".join(TASK_COLUMNS)
_FLOW_INSERT_COLUMNS = ", ".join(FLOW_COLUMNS)


class _Executor:
    """Runs the transaction's statements through SQLAlchemy's driver-level API (SQLite)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        result = await self.conn.exec_driver_sql(sql, params)
        return [tuple(row) for row in result]

    async def count(self, sql: str, params: tuple[Any, ...]) -> int:
        return (await self.conn.exec_driver_sql(sql, params)).rowcount

    async def count_many(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        return (await self.conn.exec_driver_sql(sql, rows if len(rows) > 1 else rows[0])).rowcount

    async def close(self) -> None:
        return None


class _AsyncmyExecutor(_Executor):
    """The same on the raw asyncmy connection of the transaction: a fraction of the per-statement cost
    of going through SQLAlchemy, and a fire transaction spread over many shards is hundreds of
    statements. The connection is a fire pool's (:meth:`tjobs.stores.sql_direct.DirectPool.transaction`,
    which owns the transaction), or, for a server without one, the driver connection under an engine
    connection whose transaction SQLAlchemy owns."""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    @classmethod
    async def open(cls, conn: Any) -> _AsyncmyExecutor:
        if isinstance(conn, AsyncConnection):
            raw = await conn.get_raw_connection()
            conn = raw.driver_connection
        return cls(conn.cursor())

    async def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        await self.cursor.execute(sql, params)
        return list(await self.cursor.fetchall())

    async def count(self, sql: str, params: tuple[Any, ...]) -> int:
        await self.cursor.execute(sql, params)
        return int(self.cursor.rowcount)

    async def count_many(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        await self.cursor.executemany(sql, rows)
        return int(self.cursor.rowcount)

    async def counts(self, sql: str, params: tuple[Any, ...]) -> list[int]:
        """Run several ``;``-separated statements in one round trip; their affected-row counts."""
        await self.cursor.execute(sql, params)
        counts = [int(self.cursor.rowcount)]
        while await self.cursor.nextset():
            counts.append(int(self.cursor.rowcount))
        return counts

    async def close(self) -> None:
        await self.cursor.close()


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
        may_commit: Callable[[], bool] | None = None,
        fence_epoch: int | None = None,
        counts_at_commit: bool = False,
    ) -> None:
        """``counts_at_commit``: ``begin()`` gives a raw connection whose transaction this one ends itself
        (:meth:`tjobs.stores.sql_direct.DirectPool.transaction` with ``commit=False``), the count upserts
        and the ``COMMIT`` in one round trip after the fence check."""
        self.mysql = dialect == MYSQL
        self.counts_at_commit = counts_at_commit and self.mysql
        self._counts = CountDeltas()  # the last attempt's, when they wait for the COMMIT
        self.fence_epoch = fence_epoch if self.mysql else None
        self.may_commit = may_commit
        self.mark = "%s" if self.mysql else "?"
        self.intents = intents
        self.items = items
        self.now_ms = now_ms
        self.planner = planner
        self.outcomes: dict[int, FireOutcome] = {}
        self.shards: dict[int, ShardTables] = {home.shard: home for _, home in items}

    async def run(self, begin: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        """Run the transaction in ``begin()`` (committed when its block exits cleanly): an engine
        connection's ``begin()``, or on MariaDB a fire pool's :meth:`~tjobs.stores.sql_direct.DirectPool.transaction`
        (a raw asyncmy connection)."""
        careful = False
        deadlocks = 0
        while True:
            try:
                async with begin() as conn:
                    outcomes = await self._once(conn, careful)
                    if self.may_commit is not None and not self.may_commit():
                        raise Fenced("the fence closed during the fire transaction; rolled back")
                    if self.counts_at_commit:
                        await self._commit_with_counts(conn)
            except _DuplicateFlows:
                if careful:  # cannot happen: careful mode counts every row
                    raise RuntimeError("duplicate flows in careful mode") from None
                careful = True
                continue
            except Exception as error:
                if mysql_errno(error) in DEADLOCK_ERRNOS and deadlocks == 0:
                    deadlocks += 1
                    continue
                raise
            self.outcomes = outcomes
            return

    async def _commit_with_counts(self, conn: Any) -> None:
        """The count upserts and the ``COMMIT`` in one multi-statement (the ``COMMIT`` runs only if every
        upsert passed; otherwise the pool rolls the transaction back)."""
        statements = self._counts.statements(MYSQL)
        sql = "; ".join([statement for statement, _ in statements] + ["COMMIT"])
        params = tuple(value for _, values in statements for value in values)
        run = await _AsyncmyExecutor.open(conn)
        try:
            await run.counts(sql, params)
            committed_in_batch(conn)
        finally:
            await run.close()

    async def _once(self, conn: Any, careful: bool) -> dict[int, FireOutcome]:
        run = await _AsyncmyExecutor.open(conn) if self.mysql else _Executor(conn)
        try:
            return await self._statements(run, careful)
        finally:
            await run.close()

    async def _statements(self, run: _Executor, careful: bool) -> dict[int, FireOutcome]:
        ids_by_shard: dict[int, set[int]] = defaultdict(set)
        for index, home in self.items:
            ids_by_shard[home.shard].add(self.intents[index].task_id)
        state = await self._lock(run, ids_by_shard)

        outcomes: dict[int, FireOutcome] = {}
        advanced: dict[int, dict[int, Task]] = defaultdict(dict)  # shard -> task id -> new row
        new_flows: dict[int, list[tuple[int, Flow]]] = defaultdict(list)  # shard -> (intent index, flow)
        counts = CountDeltas()  # only a fire that ends its task changes a count
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
            # The row object is this transaction's own (read just now), so the pure planner gets it
            # as is; the advanced row is built directly (dataclasses.replace is slow on this path).
            plan = self.planner(task, intent, self.now_ms)
            if plan is None:
                outcomes[index] = FireOutcome(intent, None, [])
                continue
            after = Task(
                task.id,
                task.app_id,
                task.name,
                task.key,
                task.schedule,
                task.callback,
                task.payload,
                task.misfire_policy,
                task.delivery,
                plan.status,
                plan.next_run_at_ms,
                task.version + 1,
                task.fire_count + plan.fires_added,
                task.created_at_ms,
                self.now_ms,
                task.revision,
                task.children,
            )
            state[task.id] = after
            advanced[home.shard][task.id] = after
            if plan.status is not task.status:
                counts.change(home, task.app_id, task.status, plan.status)
            flows = [new.flow_of(task, self.now_ms) for new in plan.flows]
            if flows:  # none: an instant its calendar came to exclude (the task advances alone)
                new_flows[home.shard].extend((index, flow) for flow in flows)
            outcomes[index] = FireOutcome(intent, after, flows)

        if self.counts_at_commit:  # sent with the COMMIT, after the fence check
            self._counts, counts = counts, CountDeltas()
        if isinstance(run, _AsyncmyExecutor) and not careful:  # MariaDB: one multi-statement
            await self._write_in_one_round_trip(run, new_flows, advanced, counts)
            return outcomes
        if self.fence_epoch is not None and (new_flows or advanced):
            fence_sql, fence_params = self._fence()
            await run.rows(fence_sql, tuple(fence_params))
        for shard in sorted(new_flows):
            kept = await self._insert_flows(run, self.shards[shard], new_flows[shard], careful)
            if kept is not None:
                for index in {index for index, _ in new_flows[shard]}:
                    outcomes[index].flows = [f for f in outcomes[index].flows if id(f) in kept]
        for shard in sorted(advanced):
            await self._advance(run, self.shards[shard], list(advanced[shard].values()))
        for sql, params in counts.statements(MYSQL if self.mysql else SQLITE):
            await run.count(sql, tuple(params))
        return outcomes

    async def _write_in_one_round_trip(
        self,
        run: _AsyncmyExecutor,
        new_flows: dict[int, list[tuple[int, Flow]]],
        advanced: dict[int, dict[int, Task]],
        counts: CountDeltas,
    ) -> None:
        """MariaDB: every flow insert and task update of the transaction as one multi-statement, and the
        count upsert of the tasks it completed (one per logical database) last, unless they wait for the
        ``COMMIT`` (``counts`` empty then).

        A batch spread over many shards is two statements per table touched; sent one by one that is
        hundreds of round trips. Each statement's affected-row count is still checked (not the counts'):
        fewer flows than sent means a duplicate (redo carefully), fewer tasks than locked is a bug.
        """
        statements: list[tuple[str, list[Any], int | None, bool]] = []  # sql, params, expected, is_insert
        if self.fence_epoch is not None and (new_flows or advanced):
            fence_sql, fence_params = self._fence()
            statements.append((fence_sql, fence_params, len(fence_params), False))
        marks = "(" + ", ".join(["%s"] * len(FLOW_COLUMNS)) + ")"
        for shard in sorted(set(new_flows) | set(advanced)):
            home = self.shards[shard]
            flows = new_flows.get(shard, [])
            if flows:
                params = [value for _, flow in flows for value in _flow_values(flow)]
                sql = f"INSERT IGNORE INTO {home.flows_sql} ({_FLOW_INSERT_COLUMNS}) VALUES " + ", ".join(
                    [marks] * len(flows)
                )
                statements.append((sql, params, len(flows), True))
            tasks = sorted(advanced.get(shard, {}).values(), key=lambda t: t.id)
            for start in range(0, len(tasks), MAX_PARAMS // 10):
                sql, update_params = self._update_sql(home, tasks[start : start + MAX_PARAMS // 10])
                statements.append((sql, update_params, len(tasks[start : start + MAX_PARAMS // 10]), False))
        statements.extend((sql, params, None, False) for sql, params in counts.statements(MYSQL))
        for chunk in round_trips(statements, lambda statement: statement[1]):
            await self._run_multi(run, chunk)

    def _fence(self) -> tuple[str, list[Any]]:
        """The epoch fence of every logical database of the batch (one row each when it passes)."""
        assert self.fence_epoch is not None
        homes = {home.database.index: home.database for home in self.shards.values()}
        sql, params = fence_statement(list(homes.values()), self.fence_epoch)
        return sql, list(params)

    async def _run_multi(self, run: _AsyncmyExecutor, chunk: list[tuple[str, list[Any], int | None, bool]]) -> None:
        sql = "; ".join(statement for statement, _, _, _ in chunk)
        params = tuple(value for _, values, _, _ in chunk for value in values)
        counts = await run.counts(sql, params)
        for (_, _, expected, is_insert), count in zip(chunk, counts, strict=True):
            if expected is not None and count != expected:
                if is_insert:
                    raise _DuplicateFlows()
                raise RuntimeError(f"fire transaction advanced {count} of {expected} locked rows")

    async def _lock(self, run: _Executor, ids_by_shard: dict[int, set[int]]) -> dict[int, Task]:
        lock = " FOR UPDATE" if self.mysql else ""
        parts: list[tuple[str, list[int]]] = []
        for shard in sorted(ids_by_shard):
            ids = sorted(ids_by_shard[shard])
            for start in range(0, len(ids), MAX_PARAMS):
                chunk = ids[start : start + MAX_PARAMS]
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
            for row in await run.rows(sql, tuple(params)):
                task = _task_of_values(row)
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
        self, run: _Executor, home: ShardTables, pairs: list[tuple[int, Flow]], careful: bool
    ) -> set[int] | None:
        """Insert the flows; ``None`` if all went in, else the ``id()`` of those that did."""
        marks = ", ".join([self.mark] * len(FLOW_COLUMNS))
        if self.mysql:
            sql = f"INSERT IGNORE INTO {home.flows_sql} ({_FLOW_INSERT_COLUMNS}) VALUES ({marks})"
        else:
            sql = (
                f"INSERT INTO {home.flows_sql} ({_FLOW_INSERT_COLUMNS}) VALUES ({marks}) "
                "ON CONFLICT (task_id, scheduled_at) DO NOTHING"
            )
        rows = [_flow_values(flow) for _, flow in pairs]
        if not careful:
            if await run.count_many(sql, rows) != len(rows):
                raise _DuplicateFlows()
            return None
        kept: set[int] = set()
        for (_, flow), row in zip(pairs, rows, strict=True):
            if await run.count(sql, row) == 1:
                kept.add(id(flow))
        return kept

    async def _advance(self, run: _Executor, home: ShardTables, tasks: list[Task]) -> None:
        """One ``UPDATE … CASE`` per table and chunk."""
        step = MAX_PARAMS // 10
        for start in range(0, len(tasks), step):
            chunk = sorted(tasks[start : start + step], key=lambda t: t.id)
            sql, params = self._update_sql(home, chunk)
            advanced = await run.count(sql, tuple(params))
            if advanced != len(chunk):
                raise RuntimeError(f"fire transaction advanced {advanced} of {len(chunk)} locked rows")

    def _update_sql(self, home: ShardTables, chunk: list[Task]) -> tuple[str, list[Any]]:
        if len(chunk) == 1:  # the usual case over many shards: one task in its table, no CASE
            task = chunk[0]
            one = [task.next_run_at_ms, task.status.value, task.version, task.fire_count, self.now_ms, task.id]
            return _one_task_update_sql(home.tasks_sql, self.mark), one
        arms = " ".join(["WHEN " + self.mark + " THEN " + self.mark] * len(chunk))
        marks = ", ".join([self.mark] * len(chunk))
        sql = (
            f"UPDATE {home.tasks_sql} SET "
            f"next_run_at = CASE id {arms} END, status = CASE id {arms} END, "
            f"version = CASE id {arms} END, fire_count = CASE id {arms} END, "
            f"updated_at = {self.mark} WHERE id IN ({marks})"
        )
        params: list[Any] = []
        for task in chunk:
            params.extend((task.id, task.next_run_at_ms))
        for task in chunk:
            params.extend((task.id, task.status.value))
        for task in chunk:
            params.extend((task.id, task.version))
        for task in chunk:
            params.extend((task.id, task.fire_count))
        params.append(self.now_ms)
        params.extend(task.id for task in chunk)
        return sql, params


_ONE_TASK_UPDATES: dict[tuple[str, str], str] = {}  # by tasks table and parameter mark: one per table


def _one_task_update_sql(table: str, mark: str) -> str:
    """The advance of a table's only task in the batch: what the ``CASE`` form does for one row."""
    sql = _ONE_TASK_UPDATES.get((table, mark))
    if sql is None:
        sql = _ONE_TASK_UPDATES[(table, mark)] = (
            f"UPDATE {table} SET next_run_at = {mark}, status = {mark}, version = {mark}, "
            f"fire_count = {mark}, updated_at = {mark} WHERE id = {mark}"
        )
    return sql


def _flow_values(flow: Flow) -> tuple[Any, ...]:
    return (
        flow.task_id,
        flow.scheduled_at_ms,
        flow.app_id,
        flow.kind.value,
        flow.status.value,
        flow.attempts,
        flow.next_attempt_at_ms,
        flow.missed,
        flow.last_status_code,
        clip_error(flow.last_error),
        flow.created_at_ms,
        flow.updated_at_ms,
    )


def _task_of_values(row: Sequence[Any]) -> Task:
    """:func:`tjobs.stores.schema.task_from_row` of a locked row, read as values in
    :data:`TASK_COLUMNS` order: one row per fire, so no mapping is built for it."""
    (
        id_,
        app_id,
        name,
        idem_key,
        status,
        next_run_at,
        version,
        fire_count,
        schedule,
        callback,
        payload,
        misfire_policy,
        delivery,
        created_at,
        updated_at,
        revision,
        children,
    ) = row
    return Task(
        int(id_),
        app_id,
        name,
        idem_key,
        schedule_from_text(schedule),
        callback_from_text(callback),
        orjson.loads(payload),
        MisfirePolicy(misfire_policy),
        DeliveryMode(delivery),
        TaskStatus(status),
        None if next_run_at is None else int(next_run_at),
        int(version),
        int(fire_count),
        int(created_at),
        int(updated_at),
        int(revision),
        children_from_text(children),
    )
