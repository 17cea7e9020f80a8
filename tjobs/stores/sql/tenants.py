"""The SQL store's tenants (:class:`tjobs.stores.contracts.Tenants`): apps and targets, in the first
logical database; the references of tasks to targets are counted in the shards (``task_targets_TT``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import delete, func, insert, select, union_all, update
from sqlalchemy import exc as sa_exc

from tjobs.errors import Conflict, NotFound, TargetExists, TargetVersionConflict
from tjobs.model import App, TaskStatus
from tjobs.stores.contracts import Tenants
from tjobs.stores.schema import app_from_row, app_to_row, target_from_row, target_to_row
from tjobs.stores.sql.connections import INSERT_RETRIES, SqlBase
from tjobs.targets.model import Target


class SqlTenants(SqlBase, Tenants):
    """Apps and targets."""

    async def put_app(self, app: App) -> None:
        apps = self.layout.apps
        row = app_to_row(app)
        values = {k: v for k, v in row.items() if k != "id"}
        for _ in range(INSERT_RETRIES):
            try:
                async with self._write(self.layout.apps_database.engine_url) as conn:
                    opts = self.layout.apps_options
                    result = await conn.execute(
                        update(apps).where(apps.c.id == app.id).values(**values), execution_options=opts
                    )
                    if result.rowcount == 0:
                        await conn.execute(insert(apps), [row], execution_options=opts)
                return
            except sa_exc.IntegrityError as error:
                holder = await self.find_app_by_key_hash(app.api_key_hash)
                if holder is not None and holder.id != app.id:
                    raise Conflict(f"another app already uses this API key hash ({app.id})") from error
        raise Conflict(f"app {app.id} is being written concurrently; retry")

    async def get_app(self, app_id: str) -> App | None:
        apps = self.layout.apps
        return await self._one_app(select(apps).where(apps.c.id == app_id))

    async def find_app_by_key_hash(self, api_key_hash: str) -> App | None:
        apps = self.layout.apps
        return await self._one_app(select(apps).where(apps.c.api_key_hash == api_key_hash))

    async def _one_app(self, statement: Any) -> App | None:
        async with self._connect(self.layout.apps_database.engine_url) as conn:
            result = await conn.execute(statement, execution_options=self.layout.apps_options)
            row = result.mappings().first()
        return None if row is None else app_from_row(row)

    async def list_apps(self) -> list[App]:
        apps = self.layout.apps
        async with self._connect(self.layout.apps_database.engine_url) as conn:
            statement = select(apps).order_by(apps.c.id)
            rows = await conn.execute(statement, execution_options=self.layout.apps_options)
            return [app_from_row(row) for row in rows.mappings()]

    async def delete_app(self, app_id: str) -> bool:
        apps = self.layout.apps
        async with self._write(self.layout.apps_database.engine_url) as conn:
            result = await conn.execute(
                delete(apps).where(apps.c.id == app_id), execution_options=self.layout.apps_options
            )
        return bool(result.rowcount)

    async def put_target(self, target: Target, expected_version: int | None) -> None:
        targets = self.layout.targets
        row = target_to_row(target)
        opts = self.layout.apps_options
        url = self.layout.apps_database.engine_url
        if expected_version is None:
            try:
                async with self._write(url) as conn:
                    await conn.execute(insert(targets), [row], execution_options=opts)
            except sa_exc.IntegrityError as error:
                raise TargetExists(target.app_id, target.name) from error
            return
        key = (targets.c.app_id == target.app_id, targets.c.name == target.name)
        values = {k: v for k, v in row.items() if k not in ("app_id", "name", "created_at")}
        async with self._write(url) as conn:
            result = await conn.execute(
                update(targets).where(*key, targets.c.version == expected_version).values(**values),
                execution_options=opts,
            )
            if result.rowcount == 1:
                return
            stored = (await conn.execute(select(targets.c.version).where(*key), execution_options=opts)).first()
        if stored is None:
            raise NotFound("target", target.name)
        raise TargetVersionConflict(target.name, expected_version, int(stored[0]))

    async def get_target(self, app_id: str, name: str) -> Target | None:
        targets = self.layout.targets
        statement = select(targets).where(targets.c.app_id == app_id, targets.c.name == name)
        async with self._connect(self.layout.apps_database.engine_url) as conn:
            row = (await conn.execute(statement, execution_options=self.layout.apps_options)).mappings().first()
        return None if row is None else target_from_row(row)

    async def list_targets(self, app_id: str, after_name: str | None, limit: int) -> list[Target]:
        targets = self.layout.targets
        statement = select(targets).where(targets.c.app_id == app_id)
        if after_name is not None:
            statement = statement.where(targets.c.name > after_name)
        statement = statement.order_by(targets.c.name).limit(limit)
        async with self._connect(self.layout.apps_database.engine_url) as conn:
            rows = await conn.execute(statement, execution_options=self.layout.apps_options)
            return [target_from_row(row) for row in rows.mappings()]

    async def delete_target(self, app_id: str, name: str) -> bool:
        targets = self.layout.targets
        async with self._write(self.layout.apps_database.engine_url) as conn:
            result = await conn.execute(
                delete(targets).where(targets.c.app_id == app_id, targets.c.name == name),
                execution_options=self.layout.apps_options,
            )
        return bool(result.rowcount)

    async def count_target_references(self, app_id: str, name: str) -> int:
        async def in_database(database_index: int) -> int:
            homes = [self._shard(shard) for shard in self.topology.shards_of_database(database_index)]
            parts: list[Any] = []
            for home in homes:
                r, t = home.task_targets.c, home.tasks.c
                parts.append(
                    select(func.count())
                    .select_from(home.task_targets.join(home.tasks, t.id == r.task_id))
                    .where(r.app_id == app_id, r.target == name, t.status != TaskStatus.COMPLETED.value)
                )
            async with self._connect(homes[0].database.engine_url) as conn:
                rows = await conn.execute(union_all(*parts), execution_options=homes[0].options)
                return sum(int(count) for (count,) in rows)

        counts = await asyncio.gather(*(in_database(home.index) for home in self.layout.databases))
        return sum(counts)
