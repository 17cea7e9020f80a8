"""The SQL store's hot change log (:class:`tjobs.stores.contracts.HotChangeLog`): the append-only
``hot_changes`` table in logical database 0, on an engine of its own (opened and disposed with the log),
so the DB-poll hot tier's polls and writes never wait for the store's pools.

Ids come from the table's auto-increment key. The table comes with the schema (``tjobs migrate``,
revision ``0004_hot_changes``); a log finding it missing refuses to open and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy import MetaData, and_, delete, func, insert, inspect, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tjobs.settings import StorageSettings
from tjobs.stores.contracts.hot_changes import HotChange, HotChangeLog, HotChanges
from tjobs.stores.schema import hot_changes_table
from tjobs.stores.schema_revision import StorageNotMigrated
from tjobs.stores.sql.connections import SqlBase
from tjobs.stores.sql.errors import storage_errors
from tjobs.stores.sql_layout import Layout, create_engine_for


class SqlHotChangeLog(HotChangeLog):
    def __init__(self, storage: StorageSettings) -> None:
        home = Layout(storage).apps_database
        self._storage = storage
        self._url = home.engine_url
        self._where = home.name
        self._table = hot_changes_table(MetaData(), home.schema)
        self._engine: AsyncEngine | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The log's own engine (tests count its transactions); only while open."""
        assert self._engine is not None, "the hot change log is not open"
        return self._engine

    async def open(self) -> None:
        engine = create_engine_for(self._url, self._storage)
        table = self._table
        try:
            with storage_errors(self._url):
                async with engine.connect() as conn:
                    present = await conn.run_sync(lambda sync: inspect(sync).has_table(table.name, schema=table.schema))
            if not present:
                raise StorageNotMigrated(
                    f"the DB-poll hot tier needs the {table.name!r} table in {self._where!r}, which the schema "
                    "there does not have yet: run `tjobs migrate` with this configuration"
                )
        except BaseException:
            await engine.dispose()  # its connections closed now, not by the garbage collector
            raise
        self._engine = engine

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def append(self, changes: Sequence[HotChange]) -> None:
        with storage_errors(self._url):
            async with self.engine.begin() as conn:
                await conn.execute(insert(self._table), [_row(change) for change in changes])

    async def highest_id(self) -> int:
        with storage_errors(self._url):
            async with self.engine.connect() as conn:
                return int((await conn.execute(select(func.coalesce(func.max(self._table.c.id), 0)))).scalar_one())

    async def read_after(
        self, after_id: int, limit: int, *, skip_origin: str | None = None
    ) -> list[tuple[int, HotChange]]:
        table = self._table
        where = table.c.id > after_id
        if skip_origin is not None:  # the server skips them on the primary key's range: never sent nor parsed
            last = select(func.max(table.c.id)).scalar_subquery()
            where = and_(where, or_(table.c.origin != skip_origin, table.c.id == last))
        with storage_errors(self._url):
            async with self.engine.connect() as conn:
                statement = select(table).where(where).order_by(table.c.id).limit(limit)
                rows = (await conn.execute(statement)).mappings().all()
        return [(int(row["id"]), _change(row)) for row in rows]

    async def last(self) -> tuple[int, HotChange] | None:
        table = self._table
        with storage_errors(self._url):
            async with self.engine.connect() as conn:
                row = (await conn.execute(select(table).order_by(table.c.id.desc()).limit(1))).mappings().first()
        return None if row is None else (int(row["id"]), _change(row))

    async def prune(self, created_before_ms: int) -> None:
        table = self._table
        with storage_errors(self._url):
            async with self.engine.begin() as conn:
                await conn.execute(delete(table).where(table.c.created_at_ms < created_before_ms))


class SqlHotChanges(SqlBase, HotChanges):
    def hot_change_log(self) -> SqlHotChangeLog:
        return SqlHotChangeLog(self.settings)


_COLUMNS = tuple(field.name for field in fields(HotChange))  # a change's fields are the columns, by name


def _row(change: HotChange) -> dict[str, object]:
    return {column: getattr(change, column) for column in _COLUMNS}


def _change(row: Any) -> HotChange:
    next_run = row["next_run_at_ms"]
    return HotChange(
        int(row["task_id"]),
        str(row["app_id"]),
        None if next_run is None else int(next_run),
        int(row["version"]),
        str(row["origin"]),
        int(row["created_at_ms"]),
    )
