"""The SQL store's fire path (:class:`tjobs.stores.contracts.FirePath`): the cycle load
(:mod:`tjobs.stores.sql_load` on MariaDB's direct pool), the fire transaction
(:mod:`tjobs.stores.sql_fire`, one per server), delivery outcomes (:mod:`tjobs.stores.sql_flow_updates`,
one multi-statement round trip per server on MariaDB) and the compensator's leases on stale flows.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Select, Update, case, func, select, text, tuple_, update

from tjobs.model import DueTask, FireIntent, FireOutcome, Flow, FlowStatus, FlowUpdate, Task, TaskStatus
from tjobs.stores import sql_load
from tjobs.stores.contracts import FirePath, FirePlanner
from tjobs.stores.schema import flow_from_row, task_from_row
from tjobs.stores.shard_fence import fence_statement, is_fenced, read_fence, stale
from tjobs.stores.sql.connections import SqlBase
from tjobs.stores.sql.errors import storage_error
from tjobs.stores.sql_fire import FireTransaction
from tjobs.stores.sql_flow_updates import BY_PRIMARY_KEY, run_flow_updates, write_flow_updates
from tjobs.stores.sql_layout import MYSQL, DatabaseHome, ShardTables, keys_in

Key = tuple[int, int]  # (task_id, scheduled_at)
_OPEN = tuple(s.value for s in FlowStatus if not s.terminal)  # each its own range scan of (status, next_attempt_at)
# the open statuses and the endings whose children may be due (README "Child tasks"): what a pass leases
_LEASED = _OPEN + tuple(s.value for s in FlowStatus if s.triggers_children)


class SqlFirePath(SqlBase, FirePath):
    """Load, commit, record outcomes, lease stale flows."""

    async def database_now_ms(self) -> int:
        if self.layout.dialect != MYSQL:
            return time.time_ns() // 1_000_000  # embedded: the local clock is the database clock
        async with self._connect(self.layout.databases[0].engine_url) as conn:
            value = (await conn.execute(text("SELECT UNIX_TIMESTAMP(NOW(6)) * 1000"))).scalar_one()
        milliseconds: float = float(value)  # a DECIMAL: microseconds after the point
        return round(milliseconds)

    async def load_due(
        self,
        shard: int,
        before_ms: int,
        limit: int,
        after: tuple[int, int] | None = None,
        skip: tuple[int, int] | None = None,
    ) -> list[DueTask]:
        home = self._shard(shard)
        url = home.database.engine_url
        direct = self._direct.get(url)
        if direct is not None:  # MariaDB: text SQL on the direct pool, the engine's per-query cost avoided
            async with self._direct_call(url):
                return await sql_load.load_due(direct, home, before_ms, limit, after, skip)
        mark = "%s" if self.layout.dialect == MYSQL else "?"  # the driver's: asyncmy's or sqlite3's
        sql, params = sql_load.load_due_query(home, before_ms, limit, after, skip, mark)
        async with self._connect(url) as conn:
            return sql_load.due_tasks((await conn.exec_driver_sql(sql, params)).all())

    async def count_active(self, shard: int) -> int:
        home = self._shard(shard)
        c = home.task_counts.c
        statement = select(func.coalesce(func.sum(c.n), 0)).where(
            c.table_index == home.table_index, c.status == TaskStatus.ACTIVE.value
        )
        async with self._connect(home.database.engine_url) as conn:
            return max(0, int((await conn.execute(statement, execution_options=home.options)).scalar_one()))

    async def commit_fires(
        self,
        intents: Sequence[FireIntent],
        now_ms: int,
        planner: FirePlanner,
        may_commit: Callable[[], bool] | None = None,
    ) -> list[FireOutcome]:
        outcomes: list[FireOutcome] = [FireOutcome(intent, None, []) for intent in intents]
        by_engine: dict[str, list[tuple[int, ShardTables]]] = defaultdict(list)
        for index, intent in enumerate(intents):
            home = self._shard_of_task(intent.task_id)
            if home is not None:  # an id outside the topology names no row: a failed CAS
                by_engine[home.database.engine_url].append((index, home))
        results = await asyncio.gather(
            *(
                self._fire_on_server(url, items, intents, outcomes, now_ms, planner, may_commit)
                for url, items in by_engine.items()
            )
        )
        if results and not any(committed for _, committed in results):
            raise next(error for error, _ in results if error is not None)  # nothing was written
        return outcomes

    async def _fire_on_server(
        self,
        url: str,
        items: list[tuple[int, ShardTables]],
        intents: Sequence[FireIntent],
        outcomes: list[FireOutcome],
        now_ms: int,
        planner: FirePlanner,
        may_commit: Callable[[], bool] | None,
        refused_once: bool = False,
    ) -> tuple[Exception | None, int]:
        """One server's transaction for ``items`` (index into ``intents``, shard tables), its outcomes
        written into ``outcomes``; its error is its intents' outcome, not the batch's. Returns the
        error (``None``: committed) and how many transactions committed (a refused database's retry
        without it is a second one).

        A method, not a closure of :meth:`commit_fires`: a nested function calling itself (the retry
        below) holds itself in its own closure, a reference cycle through which every batch's intents,
        outcomes, tasks and flows stayed alive until the cyclic collector ran. At thousands of fires a
        second that collector then ran every second or so and, in its middle generation, stopped the
        event loop for hundreds of milliseconds (docs/benchmarks.md, issue 14)."""
        epoch = self._fence_epoch
        pool = self._fire_pools.get(url)
        fire = FireTransaction(
            self.layout.dialect, intents, items, now_ms, planner, may_commit, epoch, counts_at_commit=pool is not None
        )
        committed = 0
        try:
            await fire.run(
                (lambda: pool.transaction(commit=False)) if pool is not None else (lambda: self._begin_write(url))
            )
        except Exception as error:
            failure = error
            if is_fenced(error):
                # A move's cut-over: the fence of one database refused the server's whole share.
                # The other databases' intents are committed again at once, without it, rather
                # than wait for the refused ones' retry (once: a second refusal fails them all).
                databases = {home.database for _, home in items}
                refusing = databases if refused_once else await self._refusing(url, databases, epoch)
                failure = stale(", ".join(sorted(database.name for database in refusing)), epoch)
                failure.__cause__ = error
                admitted = [(index, home) for index, home in items if home.database not in refusing]
                if admitted:
                    items = [(index, home) for index, home in items if home.database in refusing]
                    _, committed = await self._fire_on_server(
                        url, admitted, intents, outcomes, now_ms, planner, may_commit, refused_once=True
                    )
            elif (mapped := storage_error(error, url)) is not None:
                failure = mapped
                failure.__cause__ = error
            for index, _ in items:
                outcomes[index] = FireOutcome(intents[index], None, [], failure)
            return failure, committed
        for index, outcome in fire.outcomes.items():
            outcomes[index] = outcome
        return None, committed + 1

    async def _refusing(self, url: str, databases: set[DatabaseHome], epoch: int) -> set[DatabaseHome]:
        """Which of ``databases`` (all on ``url``) admit no write under ``epoch`` now; all of them when
        their fences cannot be read."""
        try:
            async with self._connect(url) as conn:
                return {database for database in databases if await read_fence(conn, database) > epoch}
        except Exception:
            return databases

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        # Sequential semantics per flow: the first terminal update wins, else the last one.
        final: dict[tuple[int, int], FlowUpdate] = {}
        for item in updates:
            key = (item.task_id, item.scheduled_at_ms)
            current = final.get(key)
            if current is None or not current.status.terminal:
                final[key] = item
        if self.layout.dialect == MYSQL:
            # One transaction and one multi-statement round trip per server (sql_flow_updates).
            by_engine: dict[str, dict[int, list[FlowUpdate]]] = defaultdict(lambda: defaultdict(list))
            for item in final.values():
                home = self._shard_of_task(item.task_id)
                if home is not None:
                    by_engine[home.database.engine_url][home.shard].append(item)
            await asyncio.gather(
                *(self._record_updates_on_server(url, shards, now_ms) for url, shards in by_engine.items())
            )
            return
        by_database: dict[DatabaseHome, dict[int, list[FlowUpdate]]] = defaultdict(lambda: defaultdict(list))
        for item in final.values():
            home = self._shard_of_task(item.task_id)
            if home is not None:
                by_database[home.database][home.shard].append(item)
        await self._per_database(
            {database: self._record_updates(database, shards, now_ms) for database, shards in by_database.items()}
        )

    async def _record_updates_on_server(self, url: str, shards: dict[int, list[FlowUpdate]], now_ms: int) -> None:
        databases = list({self.layout.shards[shard].database: None for shard in shards})
        fence = fence_statement(databases, self._fence_epoch)
        pool = self._fire_pools.get(url)
        if pool is not None:
            async with self._direct_call(url), pool.transaction(commit=False) as conn:  # COMMIT in the last round trip
                await write_flow_updates(conn, shards, self.layout.shards, now_ms, fence, commit=True)
            return
        async with self._write(url) as conn:
            await write_flow_updates(conn, shards, self.layout.shards, now_ms, fence)

    async def _record_updates(self, database: DatabaseHome, shards: dict[int, list[FlowUpdate]], now_ms: int) -> None:
        # SQLite: MariaDB's statements (one UPDATE per shard table), one at a time in one transaction.
        async with self._write(database.engine_url) as conn:
            await run_flow_updates(conn, shards, self.layout.shards, now_ms)

    async def shards_with_stale_flows(self, shards: Sequence[int], now_ms: int) -> set[int]:
        # Each EXISTS is a range probe of (status, next_attempt_at); one database at a time: a pass must
        # not take the fire path's connections.
        return await self._shards_where(
            shards,
            lambda home: home.flows.c.status.in_(_LEASED) & (home.flows.c.next_attempt_at <= now_ms),
            databases_at_once=False,
        )

    async def lease_stale_flows(
        self, shard: int, now_ms: int, lease_ms: int, limit: int, *, held: Callable[[str], int | None] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        home = self._shard(shard)
        lease_until = now_ms + lease_ms
        async with self._write(home.database.engine_url) as conn:
            # One query per open status: each is an ordered range scan of (status, next_attempt_at)
            # (the primary key breaks ties), so MariaDB locks only the rows it returns and a
            # concurrent caller skips them (SKIP LOCKED) instead of waiting or sharing them.
            rows: list[Any] = []
            for position, status in enumerate(_LEASED):
                pick = stale_flows_pick(home, status, now_ms, limit)
                if position == 0:  # the transaction's first statement passes the shard-map fence
                    rows += (await self._fenced(conn, home.database, pick, home.options)).mappings()
                else:
                    rows += (await conn.execute(pick, execution_options=home.options)).mappings().all()
            rows.sort(key=lambda r: (r["next_attempt_at"], r["task_id"], r["scheduled_at"]))
            rows = rows[:limit]
            if not rows:
                return []
            flows = [flow_from_row(row) for row in rows]
            # the flows the caller's deliverer holds: leased until it expects to send them, if later (the contract)
            held_until = {} if held is None else {flow.id: held(flow.id) for flow in flows}
            until: dict[Key, int] = {}
            for flow in flows:
                flow_until = held_until.get(flow.id)
                flow.next_attempt_at_ms = max(lease_until, flow_until or 0)
                if flow.next_attempt_at_ms > lease_until:
                    until[(flow.task_id, flow.scheduled_at_ms)] = flow.next_attempt_at_ms
            task_ids = sorted({f.task_id for f in flows})
            task_rows = await conn.execute(
                select(home.tasks).where(home.tasks.c.id.in_(task_ids)), execution_options=home.options
            )
            tasks = {task.id: task for task in (task_from_row(row) for row in task_rows.mappings())}
            # A pending flow of a live task is about to be re-driven: count the attempt whose outcome
            # may have been lost (see the contract), in the statement that takes the lease; not on one the
            # caller's deliverer holds.
            counted: set[Key] = set()
            for flow in flows:
                if flow.status is FlowStatus.PENDING and flow.task_id in tasks and held_until.get(flow.id) is None:
                    flow.attempts += 1
                    counted.add((flow.task_id, flow.scheduled_at_ms))
            keys = [(f.task_id, f.scheduled_at_ms) for f in flows]
            await conn.execute(lease_update(home, keys, counted, lease_until, until), execution_options=home.options)
        return [(flow, tasks.get(flow.task_id)) for flow in flows]


def stale_flows_pick(home: ShardTables, status: str, now_ms: int, limit: int) -> Select[Any]:
    """A lease's pick of one status: an ordered range scan of ``(status, next_attempt_at)``, the rows it
    returns locked and the ones another transaction holds skipped."""
    c = home.flows.c
    return (
        select(home.flows)
        .where(c.status == status, c.next_attempt_at <= now_ms)
        .order_by(c.next_attempt_at, c.task_id, c.scheduled_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def lease_update(
    home: ShardTables, keys: Sequence[Key], counted: set[Key], lease_until: int, until: dict[Key, int] | None = None
) -> Update:
    """A lease's write of the flows its picks locked (``keys``): their next attempt at ``lease_until``, or at
    ``until[key]`` for the held flows leased longer (one ``CASE`` branch per distinct instant: the compensator
    gives few, :mod:`tjobs.firing.compensator`), one attempt more on the ``counted`` ones. On MariaDB it finds
    them by the primary key, whose records the picks hold, as an outcome flush does
    (:data:`tjobs.stores.sql_flow_updates.BY_PRIMARY_KEY`): through ``flows_TT_at`` it asked for that index's entry
    of a row a flush had locked there first, the flush then waiting for the row (a deadlock, 1213)."""
    c = home.flows.c
    by_instant: dict[int, list[Key]] = defaultdict(list)
    for key, instant in sorted((until or {}).items()):
        by_instant[instant].append(key)
    row = tuple_(c.task_id, c.scheduled_at)
    return (
        update(home.flows)
        .with_hint(BY_PRIMARY_KEY.strip(), dialect_name=MYSQL)
        .where(keys_in((c.task_id, c.scheduled_at), keys))
        .values(
            next_attempt_at=case(*((row.in_(held), instant) for instant, held in by_instant.items()), else_=lease_until)
            if by_instant
            else lease_until,
            attempts=c.attempts + case((tuple_(c.task_id, c.scheduled_at).in_(sorted(counted)), 1), else_=0)
            if counted
            else c.attempts,
        )
    )
