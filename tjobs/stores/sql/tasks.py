"""The SQL store's task and flow records (:class:`tjobs.stores.contracts.TaskRecords`) other than the
creates (:mod:`tjobs.stores.sql.creates`): reads by id or key (MariaDB: on the direct pool), edits and
deletes under the shard-map fence, flows, searches (:mod:`tjobs.stores.sql_search`), counts, retention.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from asyncmy.errors import IntegrityError as DriverIntegrityError
from sqlalchemy import (
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from sharding import shard_for_key
from tjobs.errors import Conflict, NotFound, VersionConflict
from tjobs.model import Flow, FlowStatus, Task, TaskHealth, TaskStatus
from tjobs.stores import sql_search, sql_task_health
from tjobs.stores.contracts import CountCorrection, TaskRecords
from tjobs.stores.queries import FlowPosition, FlowQuery, TaskPosition, TaskQuery
from tjobs.stores.schema import (
    COMPLETED_AT_COLUMN,
    clip_error,
    flow_from_row,
    flow_to_row,
    purge_flow_indexes,
    purge_task_indexes,
    task_from_row,
    task_to_row,
)
from tjobs.stores.sql.connections import SqlBase
from tjobs.stores.sql.references import delete_references, replace_references
from tjobs.stores.sql_layout import MYSQL, ShardTables
from tjobs.stores.sql_task_counts import (
    MARKER_APP,
    CountDeltas,
    apply_corrections,
    apply_deltas,
    corrections,
    marker_claim,
    read_table_counts,
)
from tjobs.stores.task_edits import check_fields, edited_row

_TERMINAL = tuple(s.value for s in FlowStatus if s.terminal)
# the columns update_task replaces (the version is set apart), and those an owner's edit writes
_MUTABLE_COLUMNS = (
    "name",
    "schedule",
    "callback",
    "payload",
    "misfire_policy",
    "delivery",
    "children",
    "status",
    "next_run_at",
    "fire_count",
    "updated_at",
)
_EDITED_COLUMNS = (*_MUTABLE_COLUMNS, "version", "revision")


class SqlTaskRecords(SqlBase, TaskRecords):
    """Task and flow records other than the creates."""

    async def get_task(self, task_id: int) -> Task | None:
        home = self._shard_of_task(task_id)
        if home is None:
            return None
        url = home.database.engine_url
        direct = self._direct.get(url)
        if direct is not None:
            async with self._direct_call(url):
                return await direct.get_task(home, task_id)
        async with self._connect(url) as conn:
            return await self._read_task(conn, home, task_id)

    async def _read_task(self, conn: AsyncConnection, home: ShardTables, task_id: int) -> Task | None:
        statement = select(home.tasks).where(home.tasks.c.id == task_id)
        row = (await conn.execute(statement, execution_options=home.options)).mappings().first()
        return None if row is None else task_from_row(row)

    async def find_task_by_key(self, app_id: str, key: str) -> Task | None:
        home = self.layout.shards[shard_for_key(app_id, key, self.topology.shard_count)]
        direct = self._direct.get(home.database.engine_url)
        if direct is not None:
            async with self._direct_call(home.database.engine_url):
                return await direct.find_task_by_key(home, app_id, key)
        tasks_t = home.tasks
        statement = select(tasks_t).where(tasks_t.c.app_id == app_id, tasks_t.c.idem_key == key)
        async with self._connect(home.database.engine_url) as conn:
            row = (await conn.execute(statement, execution_options=home.options)).mappings().first()
        return None if row is None else task_from_row(row)

    async def update_task(self, task: Task, expected_version: int) -> Task:
        home = self._shard_of_task(task.id)
        if home is None:
            raise NotFound("task", task.id)
        tasks_t = home.tasks
        row = task_to_row(task)
        statement = (
            update(tasks_t)
            .where(tasks_t.c.id == task.id, tasks_t.c.version == expected_version)
            .values({**{name: row[name] for name in _MUTABLE_COLUMNS}, "version": expected_version + 1})
        )

        async def write(conn: AsyncConnection) -> tuple[int, Task | None]:
            locked = select(tasks_t.c.status).where(tasks_t.c.id == task.id).with_for_update()
            before = (await self._fenced(conn, home.database, locked, home.options)).rows
            result = await conn.execute(statement, execution_options=home.options)
            stored = await self._read_task(conn, home, task.id)
            if result.rowcount == 1 and stored is not None:
                await replace_references(conn, home, stored)
                await self._count(conn, home, stored.app_id, TaskStatus(before[0][0]), stored.status)
            return result.rowcount, stored

        updated, stored = await self._in_write(home.database.engine_url, write)
        if updated == 1 and stored is not None:
            return stored
        if stored is None:
            raise NotFound("task", task.id)
        raise VersionConflict(task.id, expected_version, stored.version)

    async def edit_task(
        self,
        task: Task,
        fields: Collection[str],
        *,
        expected_revision: int | None = None,
        from_status: TaskStatus | None = None,
    ) -> Task:
        check_fields(fields)
        home = self._shard_of_task(task.id)
        if home is None:
            raise NotFound("task", task.id)
        tasks_t = home.tasks

        async def write(conn: AsyncConnection) -> Task:
            # The row lock orders this edit with the fire transaction: whichever comes second sees
            # the other's row (a fire's CAS then fails on the new version; this edit keeps its progress).
            locked = select(tasks_t).where(tasks_t.c.id == task.id).with_for_update()
            rows = (await self._fenced(conn, home.database, locked, home.options)).mappings()
            if not rows:
                raise NotFound("task", task.id)
            stored = task_from_row(rows[0])
            edited = edited_row(stored, task, fields, expected_revision, from_status)
            if edited is None:
                return stored
            values = task_to_row(edited)
            await conn.execute(
                update(tasks_t).where(tasks_t.c.id == task.id).values({name: values[name] for name in _EDITED_COLUMNS}),
                execution_options=home.options,
            )
            if "callback" in fields and (stored.callback.targets or edited.callback.targets):
                await replace_references(conn, home, edited)
            await self._count(conn, home, stored.app_id, stored.status, edited.status)
            return edited

        return await self._in_write(home.database.engine_url, write)

    async def _count(
        self, conn: AsyncConnection, home: ShardTables, app_id: str, before: TaskStatus | None, after: TaskStatus | None
    ) -> None:
        """One task's change of status (``None``: absent) in ``conn``'s transaction (nothing if none)."""
        deltas = CountDeltas()
        deltas.change(home, app_id, before, after)
        await apply_deltas(conn, self.layout.dialect, deltas)

    async def _delete_locked(self, conn: AsyncConnection, home: ShardTables, task_id: int) -> bool:
        """Delete the task, its references and its count in ``conn``'s transaction (its first statement:
        the row is locked and read through the fence); whether it existed."""
        t = home.tasks.c
        locked = select(t.app_id, t.status).where(t.id == task_id).with_for_update()
        rows = (await self._fenced(conn, home.database, locked, home.options)).rows
        if not rows:
            return False
        await conn.execute(delete(home.tasks).where(t.id == task_id), execution_options=home.options)
        await delete_references(conn, home, [task_id])
        await self._count(conn, home, str(rows[0][0]), TaskStatus(rows[0][1]), None)
        return True

    async def delete_task(self, task_id: int) -> bool:
        home = self._shard_of_task(task_id)
        if home is None:
            return False
        return await self._in_write(home.database.engine_url, lambda conn: self._delete_locked(conn, home, task_id))

    async def delete_task_cancelling_flows(self, task_id: int, now_ms: int) -> bool:
        home = self._shard_of_task(task_id)
        if home is None:
            return False
        c = home.flows.c

        async def write(conn: AsyncConnection) -> bool:
            if not await self._delete_locked(conn, home, task_id):
                return False
            await conn.execute(
                update(home.flows)
                .where(c.task_id == task_id, c.status == FlowStatus.PENDING.value)
                .values(status=FlowStatus.CANCELLED.value, next_attempt_at=None, updated_at=now_ms),
                execution_options=home.options,
            )
            return True

        return await self._in_write(home.database.engine_url, write)

    async def delete_app_tasks(self, app_id: str, shard: int, limit: int, now_ms: int) -> int:
        home = self._shard(shard)
        t, f = home.tasks.c, home.flows.c

        async def write(conn: AsyncConnection) -> int:
            # the app's index range, locked: a fire of one of them waits, then finds its row gone
            pick = select(t.id, t.status).where(t.app_id == app_id).order_by(t.id).limit(limit).with_for_update()
            picked = (await self._fenced(conn, home.database, pick, home.options)).rows
            task_ids = [int(task_id) for task_id, _ in picked]
            if not task_ids:
                return 0
            await conn.execute(
                delete(home.tasks).where(t.id.in_(_ids())), {"ids": task_ids}, execution_options=home.options
            )
            await delete_references(conn, home, task_ids)
            deltas = CountDeltas()
            for _, status in picked:
                deltas.change(home, app_id, TaskStatus(status), None)
            await apply_deltas(conn, self.layout.dialect, deltas)
            await conn.execute(
                update(home.flows)
                .where(f.task_id.in_(_ids()), f.status == FlowStatus.PENDING.value)
                .values(status=FlowStatus.CANCELLED.value, next_attempt_at=None, updated_at=now_ms),
                {"ids": task_ids},
                execution_options=home.options,
            )
            return len(task_ids)

        return await self._in_write(home.database.engine_url, write)

    async def list_tasks(self, app_id: str, shard: int, after_id: int | None, limit: int) -> list[Task]:
        home = self._shard(shard)
        tasks_t = home.tasks
        statement = select(tasks_t).where(tasks_t.c.app_id == app_id)
        if after_id is not None:
            statement = statement.where(tasks_t.c.id > after_id)
        statement = statement.order_by(tasks_t.c.id).limit(limit)
        async with self._connect(home.database.engine_url) as conn:
            rows = await conn.execute(statement, execution_options=home.options)
            return [task_from_row(row) for row in rows.mappings()]

    async def insert_manual_flow(self, task_id: int, flow: Flow) -> Flow:
        home = self._shard_of_task(task_id)
        if home is None:
            raise NotFound("task", task_id)
        stored = replace(flow, task_id=task_id, last_error=clip_error(flow.last_error))
        try:
            async with self._write(home.database.engine_url) as conn:
                statement = insert(home.flows).values(flow_to_row(stored))
                await self._fenced(conn, home.database, statement, home.options)
        except (sa_exc.IntegrityError, DriverIntegrityError) as error:
            raise Conflict(f"flow {stored.id} already exists") from error
        return stored

    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None:
        home = self._shard_of_task(task_id)
        if home is None:
            return None
        url = home.database.engine_url
        direct = self._direct.get(url)
        if direct is not None:  # the retry's read (Deliverer._still_open): no engine checkout, no ROLLBACK
            with self._errors(url, writes=False):
                return await direct.get_flow(home, task_id, scheduled_at_ms)
        c = home.flows.c
        statement = select(home.flows).where(c.task_id == task_id, c.scheduled_at == scheduled_at_ms)
        async with self._connect(url) as conn:
            row = (await conn.execute(statement, execution_options=home.options)).mappings().first()
        return None if row is None else flow_from_row(row)

    async def list_flows(
        self,
        task_id: int,
        limit: int,
        before_scheduled_at_ms: int | None = None,
        after_scheduled_at_ms: int | None = None,
    ) -> list[Flow]:
        home = self._shard_of_task(task_id)
        if home is None:
            return []
        c = home.flows.c
        statement = select(home.flows).where(c.task_id == task_id)
        if before_scheduled_at_ms is not None:
            statement = statement.where(c.scheduled_at < before_scheduled_at_ms)
        if after_scheduled_at_ms is not None:  # the page just newer: read upwards from it, answer newest first
            statement = statement.where(c.scheduled_at > after_scheduled_at_ms).order_by(c.scheduled_at)
        else:
            statement = statement.order_by(c.scheduled_at.desc())
        async with self._connect(home.database.engine_url) as conn:
            rows = await conn.execute(statement.limit(limit), execution_options=home.options)
            flows = [flow_from_row(row) for row in rows.mappings()]
        return flows[::-1] if after_scheduled_at_ms is not None else flows

    async def task_health(self, task_ids: Collection[int], since_ms: int, cap: int) -> dict[int, TaskHealth]:
        routable = [task_id for task_id in task_ids if self._shard_of_task(task_id) is not None]
        found = await sql_task_health.task_health(self._shard, self._connect, routable, since_ms, cap)
        return {task_id: found.get(task_id, TaskHealth()) for task_id in task_ids}

    async def search_flows(
        self, query: FlowQuery, reads: Mapping[int, FlowPosition | None], limit: int
    ) -> dict[int, list[Flow]]:
        return await sql_search.search_flows(self._shard, self._connect, query, reads, limit)

    async def search_tasks(
        self, query: TaskQuery, reads: Mapping[int, TaskPosition | None], limit: int
    ) -> dict[int, list[Task]]:
        return await sql_search.search_tasks(self._shard, self._connect, query, reads, limit)

    async def count_flows(self, query: FlowQuery, caps: Mapping[int, int]) -> dict[int, int]:
        for shard in caps:
            self._shard(shard)  # in range before any statement
        return await sql_search.count_flows(self._shard, self._connect, query, caps)

    async def task_names(self, task_ids: Collection[int]) -> dict[int, str]:
        by_shard: dict[int, list[int]] = {}
        for task_id in set(task_ids):
            home = self._shard_of_task(task_id)
            if home is not None:
                by_shard.setdefault(home.shard, []).append(task_id)
        names: dict[int, str] = {}

        async def read(shard: int, ids: list[int]) -> None:  # the shards of a page's tasks, read at once
            home = self._shard(shard)
            statement = select(home.tasks.c.id, home.tasks.c.name).where(home.tasks.c.id.in_(ids))
            async with self._connect(home.database.engine_url) as conn:
                rows = await conn.execute(statement, execution_options=home.options)
                names.update({int(task_id): name for task_id, name in rows.all()})

        await asyncio.gather(*(read(shard, ids) for shard, ids in by_shard.items()))
        return names

    async def redrive_flow(self, task_id: int, scheduled_at_ms: int, now_ms: int) -> Flow | None:
        home = self._shard_of_task(task_id)
        if home is None:
            return None
        c = home.flows.c
        statement = (
            update(home.flows)
            .where(c.task_id == task_id, c.scheduled_at == scheduled_at_ms, c.status == FlowStatus.DEAD.value)
            .values(
                status=FlowStatus.PENDING.value,
                next_attempt_at=now_ms,
                updated_at=now_ms,
                run_log_lines=case((c.run_log.is_(None), None), else_=c.run_log_lines),  # a purged log restarts
            )
        )
        async with self._write(home.database.engine_url) as conn:
            result = await self._fenced(conn, home.database, statement, home.options)
            if not result.rowcount:
                return None
            row = (
                (
                    await conn.execute(
                        select(home.flows).where(c.task_id == task_id, c.scheduled_at == scheduled_at_ms),
                        execution_options=home.options,
                    )
                )
                .mappings()
                .first()
            )
        return None if row is None else flow_from_row(row)

    async def count_tasks(self, app_id: str, shard: int, status: TaskStatus | None = None) -> int:
        home = self._shard(shard)
        statement = select(func.count()).select_from(home.tasks).where(home.tasks.c.app_id == app_id)
        if status is not None:
            statement = statement.where(home.tasks.c.status == status.value)
        async with self._connect(home.database.engine_url) as conn:
            return int((await conn.execute(statement, execution_options=home.options)).scalar_one())

    async def read_task_counts(
        self, database_index: int, app_ids: Collection[str] | None = None
    ) -> dict[str, dict[str, int]]:
        homes = [self._shard(shard) for shard in self.topology.shards_of_database(database_index)]
        home = homes[0]
        c = home.task_counts.c
        statement = select(c.app_id, c.status, func.sum(c.n)).where(c.app_id != MARKER_APP).group_by(c.app_id, c.status)
        if app_ids is not None:
            if not app_ids:
                return {}
            statement = statement.where(c.app_id.in_(sorted(set(app_ids))))
        counts: dict[str, dict[str, int]] = {}
        async with self._connect(home.database.engine_url) as conn:
            for app_id, status, n in await conn.execute(statement, execution_options=home.options):
                counts.setdefault(str(app_id), {})[str(status)] = int(n)
        return counts

    async def reconcile_task_counts(self, shard: int) -> list[CountCorrection]:
        home = self._shard(shard)
        url = home.database.engine_url
        with self._errors(url):
            async with self._reconciling(url) as conn:
                seen = await read_table_counts(conn, home)
                claim = marker_claim(self.layout.dialect, home, seen.marker)
                if (await self._fenced(conn, home.database, claim, home.options)).rowcount != 1:
                    return []  # another reconciliation of this table committed since the snapshot
                found = corrections(seen)
                await apply_corrections(conn, self.layout.dialect, home, found)
        return found

    @asynccontextmanager
    async def _reconciling(self, url: str) -> AsyncIterator[AsyncConnection]:
        """A write transaction whose reads all see one snapshot: MariaDB ``REPEATABLE READ`` (the view of
        its first read), SQLite ``BEGIN IMMEDIATE`` (no other writer until it ends)."""
        if self.layout.dialect != MYSQL:
            async with self._begin_write(url) as conn:
                yield conn
            return
        async with self._engine(url, write=True).connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                yield conn

    async def count_dead_letters(self, database_index: int, app_ids: Sequence[str]) -> dict[str, int]:
        counts = dict.fromkeys(app_ids, 0)
        if not counts:
            return counts
        homes = [self._shard(shard) for shard in self.topology.shards_of_database(database_index)]
        parts: list[Any] = []
        for home in homes:
            f = home.flows.c
            parts.append(
                select(f.app_id, func.count())
                .where(f.app_id.in_(list(counts)), f.status == FlowStatus.DEAD.value)
                .group_by(f.app_id)
            )
        statement: Any = parts[0] if len(parts) == 1 else union_all(*parts)
        async with self._connect(homes[0].database.engine_url) as conn:
            rows = (await conn.execute(statement, execution_options=homes[0].options)).all()
        for app_id, count in rows:
            counts[str(app_id)] += int(count)
        return counts

    async def count_rows(self, database_index: int) -> dict[str, int]:
        homes = [self._shard(shard) for shard in self.topology.shards_of_database(database_index)]
        parts: list[Any] = []
        for home in homes:
            parts.append(select(literal("tasks"), func.count()).select_from(home.tasks))
            parts.append(select(literal("flows"), func.count()).select_from(home.flows))
        counts = {"tasks": 0, "flows": 0}
        async with self._connect(homes[0].database.engine_url) as conn:
            for kind, count in await conn.execute(union_all(*parts), execution_options=homes[0].options):
                counts[str(kind)] += int(count)
        return counts

    async def purge(self, shard: int, finished_before_ms: int, limit: int) -> int:
        if limit <= 0:
            return 0
        home = self._shard(shard)
        f = home.flows.c
        t = home.tasks.c
        opts = home.options
        # Oldest first along flows_TT_at (migration 0025): it stops at the first flow too new, so it reads
        # the flows it deletes and the open ones older than the cut-off, never the rest of the table. The
        # planners must not take `retry` for the status list (then sort): MariaDB's statistics are as old
        # as the last ANALYZE (0010), so it is told the index; SQLite ignores hints, and a status it must
        # compute (`status || ''`) keeps `retry` out of its choice.
        mysql = self.layout.dialect == MYSQL
        status = f.status if mysql else f.status.concat("")
        oldest = (
            select(f.task_id, f.scheduled_at)
            .where(f.scheduled_at < finished_before_ms, status.in_(_TERMINAL))
            .order_by(f.scheduled_at)
            .limit(limit)
        )
        if mysql:
            oldest = oldest.with_hint(home.flows, f"FORCE INDEX (`{purge_flow_indexes(home.flows.name)[0][0]}`)")
        async with self._write(home.database.engine_url) as conn:
            old_flows = (await self._fenced(conn, home.database, oldest, opts)).rows
            purged = 0
            if old_flows:
                # The rows read, as ranges of the key: each task's flows between the oldest and the newest
                # instant read (every terminal flow before the newest was read: it went oldest first), at the
                # newest only those read. A list of (task_id, scheduled_at) pairs instead cost MariaDB more a
                # row the longer it was (a statement of 1,000 took 0.9 s on a table of 100,000 flows).
                newest = max(int(at) for _, at in old_flows)
                result = await conn.execute(
                    delete(home.flows).where(
                        f.task_id.in_(sorted({int(task_id) for task_id, _ in old_flows})),
                        f.scheduled_at.between(min(int(at) for _, at in old_flows), newest),
                        or_(
                            f.scheduled_at < newest,
                            f.task_id.in_(sorted({int(task_id) for task_id, at in old_flows if int(at) == newest})),
                        ),
                        f.status.in_(_TERMINAL),
                    ),
                    execution_options=opts,
                )
                purged += result.rowcount
            room = limit - purged
            if room > 0:
                completed = TaskStatus.COMPLETED
                old_tasks = (
                    await conn.execute(_old_completed(home, mysql, finished_before_ms, room), execution_options=opts)
                ).all()
                if old_tasks:
                    task_ids = [int(task_id) for task_id, _ in old_tasks]
                    result = await conn.execute(
                        delete(home.tasks).where(t.id.in_(bindparam("ids", expanding=True))),
                        {"ids": task_ids},
                        execution_options=opts,
                    )
                    purged += result.rowcount
                    await delete_references(conn, home, task_ids)
                    deltas = CountDeltas()
                    for _, app_id in old_tasks:
                        deltas.change(home, str(app_id), completed, None)
                    await apply_deltas(conn, self.layout.dialect, deltas)
        return purged


def _old_completed(home: ShardTables, mysql: bool, finished_before_ms: int, limit: int) -> Any:
    """The completed tasks last updated before the cut-off, oldest first, locked: along ``tasks_TT_done``
    (migration 0026), which stops at the first one too new. MariaDB reads its virtual ``completed_at``
    (told the index: its statistics are as old as the last ANALYZE); SQLite is told its partial index too
    (it took ``due`` for the status, then sorted), which it can use only when the read repeats the index's
    condition word for word: the status is written in, not bound."""
    t = home.tasks.c
    ((name, _columns),) = purge_task_indexes(home.tasks.name, MYSQL if mysql else "sqlite")
    if mysql:
        completed_at: Any = literal_column(COMPLETED_AT_COLUMN)
        read = select(t.id, t.app_id).where(completed_at < finished_before_ms).order_by(completed_at, t.id)
        read = read.with_hint(home.tasks, f"FORCE INDEX (`{name}`)")
    else:
        return text(  # SQLAlchemy's SQLite compiler drops table hints
            f"SELECT id, app_id FROM {home.tasks_sql} INDEXED BY {name} WHERE status = 'completed' "
            "AND updated_at < :before ORDER BY updated_at, id LIMIT :limit"
        ).bindparams(before=finished_before_ms, limit=limit)
    return read.limit(limit).with_for_update()


def _ids() -> Any:
    """The expanding ``ids`` parameter of a statement over a list of task ids."""
    return bindparam("ids", expanding=True)
