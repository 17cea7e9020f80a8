"""The SQL store's shard administration (:class:`tjobs.stores.contracts.ShardAdmin`): its servers, the
shard map it routes by and writes under (the fence, :mod:`tjobs.stores.shard_fence`), the recorded map
and moves, the layout record, and other nodes' fire sessions (:mod:`tjobs.stores.sql_sessions`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sharding.shard_map import ShardMap
from tjobs.stores.contracts import MoveRow, ServerSessions, ShardAdmin
from tjobs.stores.copy_pace import CopyPace
from tjobs.stores.layout_record import ensure_layout
from tjobs.stores.shard_fence import read_recorded_map, swap_recorded_map
from tjobs.stores.sql.connections import SqlBase
from tjobs.stores.sql.moves import SqlDatabaseMoves
from tjobs.stores.sql_layout import MYSQL, Layout, configured_servers, safe_url
from tjobs.stores.sql_move import recorded_moves
from tjobs.stores.sql_sessions import kill_connections


class SqlShardAdmin(SqlBase, ShardAdmin):
    """Servers, the shard map and its fence, moves, the layout record, sessions."""

    async def check_layout(self) -> None:
        home = self.layout.apps_database
        where = f"database {home.name} on {safe_url(home.engine_url)}"
        with self._errors(home.engine_url, writes=False):
            await ensure_layout(self._engine(home.engine_url, write=True), self.layout, self.settings, where)

    def database_servers(self) -> list[str]:
        return list(self._server_urls)

    def server_of_shard(self, shard: int) -> str:
        return self._server_names[self._shard(shard).database.engine_url]

    async def ping_server(self, server: str) -> None:
        await self._ping_url(self._url_of_server(server))

    def configured_servers(self) -> list[str]:
        return list(configured_servers(self.settings.urls))

    def seed_shard_map(self) -> ShardMap:
        name_of = {url: name for name, url in configured_servers(self.settings.urls).items()}
        return ShardMap.seed([name_of[url] for url in self.settings.urls], self.topology)

    def use_shard_map(self, shard_map: ShardMap) -> None:
        if self._shard_map is not None and shard_map.epoch <= self._shard_map.epoch:
            return
        layout = Layout(self.settings, shard_map.placement)
        if self._engines:
            for url in layout.engine_urls():
                if url not in self._engines:
                    self._open(url)
        names = layout.server_names()
        urls: dict[str, str] = {}
        for url, name in names.items():
            urls.setdefault(name, url)
        self.layout, self._server_names, self._server_urls = layout, names, urls
        self._shard_map, self._fence_epoch = shard_map, shard_map.epoch

    def shard_map(self) -> ShardMap | None:
        return self._shard_map

    async def read_shard_map(self) -> ShardMap | None:
        url = self.layout.apps_database.engine_url
        async with self._connect(url) as conn:
            return await read_recorded_map(conn, self.layout)

    def database_moves(
        self, batch_rows: int, pace: CopyPace, rest: Callable[[float], Awaitable[None]]
    ) -> SqlDatabaseMoves:
        return SqlDatabaseMoves(self.settings, batch_rows, pace, rest)

    async def read_shard_moves(self) -> list[MoveRow]:
        if self.layout.dialect != MYSQL:
            return []
        home = self.layout.apps_database
        async with self._connect(home.engine_url) as conn:
            return await recorded_moves(conn, home.schema or home.name)

    async def swap_shard_map(self, new: ShardMap, expected_epoch: int | None) -> bool:
        async with self._write(self.layout.apps_database.engine_url) as conn:
            return await swap_recorded_map(conn, self.layout, new, expected_epoch)

    def fire_sessions(self) -> dict[str, ServerSessions]:
        recorded: dict[str, ServerSessions] = {}
        for url, registry in self._sessions.items():
            if (ids := registry.ids()) and registry.booted_at_s is not None:
                recorded[self._server_names[url]] = ServerSessions(registry.booted_at_s, ids)
        return recorded

    async def end_sessions(self, server: str, sessions: ServerSessions) -> int:
        url = self._url_of_server(server)
        pool = self._direct.get(url)
        if pool is None or not sessions.ids:
            return 0
        own = set(self._sessions[url].ids()) if url in self._sessions else set()
        async with self._direct_call(url), pool.cursor() as cursor:
            return await kill_connections(cursor, sessions, own)
