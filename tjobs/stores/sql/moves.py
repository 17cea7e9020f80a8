"""The SQL store's side of moving a logical database (:class:`tjobs.stores.contracts.DatabaseMoves`):
the move records and the chunked copy with change capture of :mod:`tjobs.stores.sql_move`, and the
fences of :mod:`tjobs.stores.shard_fence`, on engines of their own (closed with the moves)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from tjobs.settings import StorageSettings
from tjobs.stores.contracts import DatabaseMove, DatabaseMoves, MoveRow
from tjobs.stores.copy_pace import CopyPace
from tjobs.stores.shard_fence import RETIRED_EPOCH, read_fence, write_fence
from tjobs.stores.sql_layout import DatabaseHome, Layout, create_engine_for
from tjobs.stores.sql_move import DatabaseCopy, MoveRecords


class SqlDatabaseMove(DatabaseCopy, DatabaseMove):
    """One move: the copy of ``source``'s database to ``target``, and both copies' fences."""

    def __init__(
        self,
        source: DatabaseHome,
        target: DatabaseHome,
        engines: tuple[AsyncEngine, AsyncEngine],
        batch_rows: int,
        pace: CopyPace,
        rest: Callable[[float], Awaitable[None]],
    ) -> None:
        super().__init__(*engines, source.name, batch_rows, pace, rest)
        self.source_home, self.target_home = source, target

    async def source_fence(self) -> int:
        if not await self._table_names(self.source):
            return RETIRED_EPOCH
        async with self.source.connect() as conn:
            return await read_fence(conn, self.source_home)

    async def fence_source(self, epoch: int) -> None:
        async with self.source.begin() as conn:
            await write_fence(conn, self.source_home, epoch)

    async def fence_target(self, epoch: int) -> None:
        async with self.target.begin() as conn:
            await write_fence(conn, self.target_home, epoch)

    async def drop(self, on_target: bool) -> None:
        await self.drop_on(self.target if on_target else self.source)

    async def exists(self, on_target: bool) -> bool:
        return await self.exists_on(self.target if on_target else self.source)


class SqlDatabaseMoves(DatabaseMoves):
    def __init__(
        self,
        settings: StorageSettings,
        batch_rows: int,
        pace: CopyPace,
        rest: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.batch_rows = batch_rows
        self.pace = pace
        self._rest = rest
        self._engines: dict[str, AsyncEngine] = {}
        first = Layout(settings).apps_database  # logical database 0: it never moves
        self._records = MoveRecords(self._engine(first.engine_url), first.schema or first.name)

    def _engine(self, url: str) -> AsyncEngine:
        engine = self._engines.get(url)
        if engine is None:
            engine = self._engines[url] = create_engine_for(url, self.settings)
        return engine

    def _home(self, placement: Sequence[str], database: int) -> DatabaseHome:
        return Layout(self.settings, placement).databases[database]

    async def all(self) -> list[MoveRow]:
        return await self._records.all()

    async def get(self, database: int) -> MoveRow | None:
        return await self._records.get(database)

    async def put(self, row: MoveRow, now_ms: int) -> None:
        await self._records.put(row, now_ms)

    async def delete(self, database: int) -> None:
        await self._records.delete(database)

    def move(self, row: MoveRow, placement: Sequence[str]) -> SqlDatabaseMove:
        servers = list(placement)
        servers[row.database] = row.source
        source = self._home(servers, row.database)
        servers[row.database] = row.target
        target = self._home(servers, row.database)
        engines = self._engine(source.engine_url), self._engine(target.engine_url)
        return SqlDatabaseMove(source, target, engines, self.batch_rows, self.pace, self._rest)

    async def fence(self, placement: Sequence[str], database: int) -> int:
        home = self._home(placement, database)
        async with self._engine(home.engine_url).connect() as conn:
            return await read_fence(conn, home)

    async def close(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await engine.dispose()
