"""The SQL store's task and flow records (:class:`tjobs.stores.contracts.TaskRecords`) other than the
creates (:mod:`tjobs.stores.sql.creates`): reads by id or key (MariaDB: on the direct pool), edits and
deletes under the shard-map fence, flows, searches (:mod:`tjobs.stores.sql_search`), counts, retention.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from asyncmy.errors import IntegrityError as DriverIntegrityError
from sqlalchemy import bindparam, delete, func, insert, literal, select, tuple_, union_all, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from sharding import shard_for_key, shard_of_task_id
from tjobs.errors import Conflict, NotFound, VersionConflict
from tjobs.model import Flow, FlowStatus, Task, TaskHealth, TaskStatus
from tjobs.stores import sql_search, sql_task_health
from tjobs.stores.contracts import DEAD_LETTERS, DatabaseCounts, TaskRecords
from tjobs.stores.contracts.tasks import no_tasks
from tjobs.stores.queries import FlowPosition, FlowQuery, TaskPosition, TaskQuery
from tjobs.stores.schema import clip_error, flow_from_row, flow_to_row, task_from_row, task_to_row
from tjobs.stores.sql.connections import SqlBase
from tjobs.stores.sql.references import delete_references, replace_references
from tjobs.stores.sql_layout import ShardTables
from tjobs.stores.task_edits import check_fields, edited_row

STATUS_CHUNK = 500  # task ids per status read of count_by_app's asked tasks
_TERMINAL = tuple(s.value for s in FlowStatus if s.terminal)
# the columns update_task replaces (the version is set apart), and those an owner's edit writes
_MUTABLE_COLUMNS = (
    "name",
    "schedule",
    "callback",
    "payload",
    "misfire_policy",
    "delivery",
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
        async with self._write(home.database.engine_url) as conn:
            result = await self._fenced(conn, home.database, statement, home.options)
            stored = await self._read_task(conn, home, task.id)
            if result.rowcount == 1 and stored is not None:
                await replace_references(conn, home, stored)
        if result.rowcount == 1 and stored is not None:
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
        async with self._write(home.database.engine_url) as conn:
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
        return edited

    async def delete_task(self, task_id: int) -> bool:
        home = self._shard_of_task(task_id)
        if home is None:
            return False
        async with self._write(home.database.engine_url) as conn:
            statement = delete(home.tasks).where(home.tasks.c.id == task_id)
            result = await self._fenced(conn, home.database, statement, home.options)
            if result.rowcount:
                await delete_references(conn, home, [task_id])
        return bool(result.rowcount)

    async def delete_task_cancelling_flows(self, task_id: int, now_ms: int) -> bool:
        home = self._shard_of_task(task_id)
        if home is None:
            return False
        c = home.flows.c
        async with self._write(home.database.engine_url) as conn:
            statement = delete(home.tasks).where(home.tasks.c.id == task_id)
            result = await self._fenced(conn, home.database, statement, home.options)
            if not result.rowcount:
                return False
            await delete_references(conn, home, [task_id])
            await conn.execute(
                update(home.flows)
                .where(c.task_id == task_id, c.status == FlowStatus.PENDING.value)
                .values(status=FlowStatus.CANCELLED.value, next_attempt_at=None, updated_at=now_ms),
                execution_options=home.options,
            )
        return True

    async def delete_app_tasks(self, app_id: str, shard: int, limit: int, now_ms: int) -> int:
        home = self._shard(shard)
        t, f = home.tasks.c, home.flows.c
        async with self._write(home.database.engine_url) as conn:
            # the app's index range, locked: a fire of one of them waits, then finds its row gone
            pick = select(t.id).where(t.app_id == app_id).order_by(t.id).limit(limit).with_for_update()
            task_ids = [
                int(task_id) for task_id in (await self._fenced(conn, home.database, pick, home.options)).scalars()
            ]
            if not task_ids:
                return 0
            await conn.execute(
                delete(home.tasks).where(t.id.in_(_ids())), {"ids": task_ids}, execution_options=home.options
            )
            await delete_references(conn, home, task_ids)
            await conn.execute(
                update(home.flows)
                .where(f.task_id.in_(_ids()), f.status == FlowStatus.PENDING.value)
                .values(status=FlowStatus.CANCELLED.value, next_attempt_at=None, updated_at=now_ms),
                {"ids": task_ids},
                execution_options=home.options,
            )
        return len(task_ids)

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
        c = home.flows.c
        statement = select(home.flows).where(c.task_id == task_id, c.scheduled_at == scheduled_at_ms)
        async with self._connect(home.database.engine_url) as conn:
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
            .values(status=FlowStatus.PENDING.value, next_attempt_at=now_ms, updated_at=now_ms)
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

    async def count_by_app(
        self, database_index: int, then_ask: Callable[[], Collection[int]] = no_tasks
    ) -> DatabaseCounts:
        homes = [self._shard(shard) for shard in self.topology.shards_of_database(database_index)]
        parts: list[Any] = []
        for home in homes:
            t, f = home.tasks.c, home.flows.c
            parts.append(select(t.app_id, t.status, func.count()).group_by(t.app_id, t.status))
            parts.append(
                select(f.app_id, literal(DEAD_LETTERS), func.count())
                .where(f.status == FlowStatus.DEAD.value)
                .group_by(f.app_id)
            )
        counts: dict[str, dict[str, int]] = {}
        statuses: dict[int, str | None] = {}
        async with self._snapshot(homes[0].database.engine_url) as conn:
            rows = await conn.execute(union_all(*parts), execution_options=homes[0].options)
            for app_id, status, count in rows:
                of_app = counts.setdefault(str(app_id), {})
                of_app[str(status)] = of_app.get(str(status), 0) + int(count)
            asked = [task_id for task_id in then_ask() if database_index == self._database_of_task(task_id)]
            statuses = dict.fromkeys(asked)
            for chunk in range(0, len(asked), STATUS_CHUNK):
                by_shard: dict[int, list[int]] = {}
                for task_id in asked[chunk : chunk + STATUS_CHUNK]:
                    by_shard.setdefault(shard_of_task_id(task_id), []).append(task_id)
                reads = [
                    select(self._shard(shard).tasks.c.id, self._shard(shard).tasks.c.status).where(
                        self._shard(shard).tasks.c.id.in_(ids)
                    )
                    for shard, ids in by_shard.items()
                ]
                statement: Any = reads[0] if len(reads) == 1 else union_all(*reads)
                for task_id, status in await conn.execute(statement, execution_options=homes[0].options):
                    statuses[int(task_id)] = str(status)
        return DatabaseCounts(counts, statuses)

    def _database_of_task(self, task_id: int) -> int | None:
        if self._shard_of_task(task_id) is None:
            return None
        return shard_of_task_id(task_id) // self.topology.tables_per_database

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
        async with self._write(home.database.engine_url) as conn:
            old_flows = (
                await self._fenced(
                    conn,
                    home.database,
                    select(f.task_id, f.scheduled_at)
                    .where(f.status.in_(_TERMINAL), f.scheduled_at < finished_before_ms)
                    .limit(limit),
                    opts,
                )
            ).rows
            purged = 0
            if old_flows:
                result = await conn.execute(
                    delete(home.flows).where(
                        tuple_(f.task_id, f.scheduled_at).in_([tuple(r) for r in old_flows]),
                        f.status.in_(_TERMINAL),
                    ),
                    execution_options=opts,
                )
                purged += result.rowcount
            room = limit - purged
            if room > 0:
                old_tasks = (
                    (
                        await conn.execute(
                            select(t.id).where(t.status == "completed", t.updated_at < finished_before_ms).limit(room),
                            execution_options=opts,
                        )
                    )
                    .scalars()
                    .all()
                )
                if old_tasks:
                    result = await conn.execute(
                        delete(home.tasks).where(t.id.in_(bindparam("ids", expanding=True)), t.status == "completed"),
                        {"ids": list(old_tasks)},
                        execution_options=opts,
                    )
                    purged += result.rowcount
                    await delete_references(conn, home, list(old_tasks))
        return purged


def _ids() -> Any:
    """The expanding ``ids`` parameter of a statement over a list of task ids."""
    return bindparam("ids", expanding=True)
