"""The SQL store's engines, pools and connections, shared by every role's part of the store.

:class:`SqlBase` opens one engine per server URL (MariaDB) or file (SQLite) and, on MariaDB, the raw
asyncmy pools of :mod:`tjobs.stores.sql_direct` (the API's inserts and reads, the fire transactions and
outcome writes, a health connection). Every connection it hands out maps its errors through the one
mapping of :mod:`tjobs.stores.sql.errors`; shards are resolved to their tables through the layout in use
(:mod:`tjobs.stores.sql_layout`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, closing
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, exists, literal, select, text, union_all
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import QueuePool

from sharding import shard_of_task_id
from sharding.shard_map import ShardMap
from tjobs.errors import StaleShardMap
from tjobs.model import Task
from tjobs.settings import StorageSettings
from tjobs.stores.contracts.lifecycle import StoreLifecycle
from tjobs.stores.shard_fence import stale
from tjobs.stores.sql.errors import Deadlocked, storage_errors
from tjobs.stores.sql_direct import (
    DirectPool,
    GroupCommit,
    HealthConnection,
    Outcome,
    WriteAttempt,
    connect_kwargs,
    fire_connect_kwargs,
)
from tjobs.stores.sql_fenced import StatementResult, execute_fenced
from tjobs.stores.sql_layout import (
    MYSQL,
    WRITE_OPTION,
    DatabaseHome,
    Layout,
    ShardTables,
    create_engine_for,
    sqlite_path,
    unavailable,
)
from tjobs.stores.sql_sessions import SessionRegistry

T = TypeVar("T")

DEADLOCK_RETRIES = 3
"""Runs of a write transaction again after MariaDB rolled it back as a deadlock's victim (:meth:`SqlBase._in_write`)."""
logger = logging.getLogger(__name__)

INSERT_RETRIES = 3  # a write that lost a race to a concurrent one (a key, an id) is tried again this often
CLOSE_WAIT_S = 5.0  # close waits this long at most for the connections still in use to come back


class SqlBase(StoreLifecycle):
    """What every role's part of the SQL store shares: settings, layout, engines, pools, connections."""

    def __init__(self, settings: StorageSettings) -> None:
        self.settings = settings
        self.layout = Layout(settings)
        self.topology = self.layout.topology
        self._engines: dict[str, AsyncEngine] = {}
        self._writers: dict[str, AsyncEngine] = {}
        self._direct: dict[str, DirectPool] = {}  # MariaDB: the API's inserts and reads (sql_direct)
        self._fire_pools: dict[str, DirectPool] = {}  # MariaDB: fire transactions, outcome writes (sql_direct)
        self._run_pools: dict[str, DirectPool] = {}  # MariaDB: runs' reports, read and written (sql_run_writes)
        self._health: dict[str, HealthConnection] = {}  # MariaDB: ping() outside the pools
        self._groups: dict[str, GroupCommit] = {}  # MariaDB: concurrent single inserts, per server
        self._file_writers: dict[str, asyncio.Lock] = {}  # SQLite: the node's writers of a file, in turn
        self._server_names = self.layout.server_names()  # engine URL -> host:port (or file)
        self._server_urls: dict[str, str] = {}  # name -> the engine URL its ping uses (the first)
        for url, name in self._server_names.items():
            self._server_urls.setdefault(name, url)
        self._sessions: dict[str, SessionRegistry] = {}  # MariaDB: engine URL -> open session ids
        self._shard_map: ShardMap | None = None  # routing by the seed (the configured list) until given one
        self._fence_epoch = 0  # the epoch writes are made under (tjobs.stores.shard_fence)

    async def start(self) -> None:
        if self._engines:
            return
        for url in self.layout.engine_urls():
            self._open(url)

    def _open(self, url: str) -> None:
        """The engine, pools and group commit of one server (or SQLite file)."""
        engine = create_engine_for(url, self.settings)
        self._engines[url] = engine
        self._writers[url] = engine.execution_options(**{WRITE_OPTION: True})
        if self.layout.dialect == MYSQL:
            self._sessions[url] = sessions = SessionRegistry()
            sessions.attach(engine)
        kwargs = connect_kwargs(url, self.settings) if self.layout.dialect == MYSQL else None
        if kwargs is not None:
            self._direct[url] = DirectPool(kwargs, self.settings.pool_size)
            self._fire_pools[url] = DirectPool(
                fire_connect_kwargs(kwargs), self.settings.pool_size, on_connect=self._sessions[url].track
            )
            # the fire pool's sessions, a pool of their own: a burst of reports never waits out a fire
            self._run_pools[url] = DirectPool(
                fire_connect_kwargs(kwargs), self.settings.pool_size, on_connect=self._sessions[url].track
            )
            self._health[url] = HealthConnection(kwargs)
            self._groups[url] = GroupCommit(
                functools.partial(self._write_group, url), max_flushes=max(1, self.settings.pool_size // 2)
            )
        elif self.layout.dialect != MYSQL:  # SQLite: one writer per file at a time anyway
            self._groups[url] = GroupCommit(functools.partial(self._write_group, url), max_flushes=1)
            self._file_writers[url] = asyncio.Lock()

    async def close(self) -> None:
        engines = list(self._engines.values())
        direct = [*self._direct.values(), *self._fire_pools.values(), *self._run_pools.values()]
        for health in self._health.values():
            health.close()
        self._health.clear()
        self._engines.clear()
        self._writers.clear()
        self._direct.clear()
        self._fire_pools.clear()
        self._run_pools.clear()
        self._groups.clear()
        self._file_writers.clear()
        self._sessions.clear()
        await _given_back(engines, CLOSE_WAIT_S)
        await asyncio.gather(*(engine.dispose() for engine in engines), *(pool.close() for pool in direct))

    async def ping(self) -> None:
        """Every server answers ``SELECT 1``; on MariaDB over a connection of its own, so that pools
        busy with fires do not make a reachable server look down (:class:`HealthConnection`)."""
        await asyncio.gather(*(self._ping_url(url) for url in self._engines))

    async def _ping_url(self, url: str) -> None:
        health = self._health.get(url)
        if health is not None:
            async with self._direct_call(url):
                await health.ping()
            return
        if self.layout.dialect != MYSQL:  # SQLite: the file itself, not a pooled connection writers may all hold
            try:
                await asyncio.to_thread(_read_sqlite_header, sqlite_path(url))
            except sqlite3.Error as error:  # the file cannot be read: to the node, its server is down
                raise unavailable(url, error) from error
            return
        async with self._connect(url) as conn:
            await conn.execute(text("SELECT 1"))

    def _url_of_server(self, server: str) -> str:
        try:
            return self._server_urls[server]
        except KeyError:
            raise ValueError(f"no database server named {server!r} in storage.urls") from None

    def _engine(self, url: str, write: bool) -> AsyncEngine:
        engines = self._writers if write else self._engines
        try:
            return engines[url]
        except KeyError:
            raise RuntimeError("the store is not started; call start() first") from None

    def _errors(self, url: str, writes: bool = True) -> AbstractContextManager[None]:
        """The one error mapping (:mod:`tjobs.stores.sql.errors`) for a call to the server of ``url``;
        with ``writes``, a write the shard-map fence refused raises :class:`tjobs.errors.StaleShardMap`
        under the epoch in use when it failed."""

        def fenced() -> StaleShardMap:
            return stale(f"a logical database on {self._server_names.get(url, url)}", self._fence_epoch)

        return storage_errors(url, fenced if writes else None)

    @asynccontextmanager
    async def _connect(self, url: str) -> AsyncIterator[AsyncConnection]:
        """A connection for reads (a deferred transaction, rolled back at the end)."""
        with self._errors(url, writes=False):
            async with self._engine(url, write=False).connect() as conn:
                yield conn

    @asynccontextmanager
    async def _write(self, url: str) -> AsyncIterator[AsyncConnection]:
        """A write transaction, committed when the block exits cleanly (SQLite: ``BEGIN IMMEDIATE``)."""
        with self._errors(url):
            async with self._begin_write(url) as conn:
                yield conn

    async def _in_write(self, url: str, body: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """``body`` in a write transaction (:meth:`_write`), run again from its start when MariaDB rolled
        the transaction back as a deadlock's victim, :data:`DEADLOCK_RETRIES` times at most (then
        :class:`~tjobs.stores.sql.errors.Deadlocked`, a 503). For a transaction whose every statement and
        every decision is in ``body``: nothing of a rolled-back run is kept. (Two edits of one app's tasks
        lock their task rows, then the app's count rows: a transaction holding a count row that asks for a
        task row deadlocks with one.)"""
        for retry in range(DEADLOCK_RETRIES + 1):
            try:
                async with self._write(url) as conn:
                    return await body(conn)
            except Deadlocked:
                if retry == DEADLOCK_RETRIES:
                    raise
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def _begin_write(self, url: str) -> AsyncIterator[AsyncConnection]:
        """A write transaction on the engine's own connection. On SQLite the node's writers of one file
        take their turn here, in order of arrival, before ``BEGIN IMMEDIATE``: left to SQLite's busy
        handler (which polls with growing sleeps, in no order) one writer among hundreds could wait past
        the busy timeout while later ones went first, and its request answered 503 "database is
        locked" (test_changes_while_firing[sqlite] at load 7). The busy timeout is left for the other
        processes on the file (a migration, the CLI)."""
        turn = self._file_writers.get(url)
        if turn is None:
            async with self._engine(url, write=True).begin() as conn:
                yield conn
            return
        async with turn, self._engine(url, write=True).begin() as conn:
            yield conn

    async def _fenced(
        self, conn: AsyncConnection, database: DatabaseHome, statement: Any, options: dict[str, Any]
    ) -> StatementResult:
        """The first statement of a write transaction on ``database``: on MariaDB it passes the
        shard-map fence in the same round trip (:mod:`tjobs.stores.sql_fenced`)."""
        if self.layout.dialect == MYSQL:
            return await execute_fenced(conn, [database], self._fence_epoch, statement, options)
        return StatementResult.of(await conn.execute(statement, execution_options=options))

    @asynccontextmanager
    async def _direct_call(self, url: str) -> AsyncIterator[None]:
        """A call on a raw asyncmy connection of :mod:`tjobs.stores.sql_direct`, its driver errors mapped
        as the engine's are."""
        with self._errors(url):
            yield

    def _shard(self, shard: int) -> ShardTables:
        if not 0 <= shard < self.topology.shard_count:
            raise ValueError(f"shard {shard} is outside 0..{self.topology.shard_count - 1}")
        return self.layout.shards[shard]

    async def _shards_where(
        self,
        shards: Sequence[int],
        condition: Callable[[ShardTables], ColumnElement[bool]],
        *,
        databases_at_once: bool,
    ) -> set[int]:
        """The shards among ``shards`` whose flows hold a row matching ``condition`` (built per shard's
        tables): one statement per database, ``SELECT <shard> WHERE EXISTS (…)`` with ``UNION ALL`` over
        its shards. ``databases_at_once`` reads the databases concurrently (a take-over waiting on it),
        else one after another (a background pass must not take the fire path's connections)."""
        by_database: dict[str, list[ShardTables]] = {}
        for shard in shards:
            home = self._shard(shard)
            by_database.setdefault(home.database.name, []).append(home)

        async def probe(homes: list[ShardTables]) -> set[int]:
            parts = [
                select(literal(home.shard).label("shard")).where(exists().where(condition(home))) for home in homes
            ]
            statement = parts[0] if len(parts) == 1 else union_all(*parts)
            async with self._connect(homes[0].database.engine_url) as conn:
                rows = await conn.execute(statement, execution_options=homes[0].options)
                return {int(row[0]) for row in rows}

        if databases_at_once:
            return set().union(*await asyncio.gather(*(probe(homes) for homes in by_database.values())))
        found: set[int] = set()
        for homes in by_database.values():
            found |= await probe(homes)
        return found

    def _shard_of_task(self, task_id: int) -> ShardTables | None:
        if task_id <= 0:
            return None
        shard = shard_of_task_id(task_id)
        return self.layout.shards[shard] if shard < self.topology.shard_count else None

    async def _per_database(self, jobs: dict[DatabaseHome, Awaitable[T]]) -> list[T]:
        return list(await asyncio.gather(*jobs.values()))

    @abstractmethod
    async def _write_group(self, url: str, tasks: list[Task], attempt: WriteAttempt) -> list[Outcome]:
        """Write one flush of the group commit of ``url`` (:mod:`tjobs.stores.sql.creates`)."""


async def _given_back(engines: Sequence[AsyncEngine], timeout_s: float) -> None:
    """Wait until no connection of ``engines`` is in use, ``timeout_s`` at most. A call left running past its
    caller (a create's write after ``storage.create_timeout_s``: never cancelled, it ends on its own) may hold
    one while the store closes. Disposing of an engine closes only the connections in its pool; one in use
    goes back, when its call ends, to the pool the engine dropped, and nothing closes it: the garbage
    collector finds it later (aiosqlite's ``ResourceWarning``, tests/unit/test_sqlite_store_close.py)."""
    pools = [pool for pool in (engine.sync_engine.pool for engine in engines) if isinstance(pool, QueuePool)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (in_use := sum(pool.checkedout() for pool in pools)) > 0 and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # (the pools' counts, polled: rarely any in use at close)
    if in_use > 0:
        logger.warning(
            "store closing with %d connection(s) still in use after %.0f s; they are left to the garbage collector",
            in_use,
            timeout_s,
            extra={"action": "store_close_in_use"},
        )


def _read_sqlite_header(path: str) -> None:
    """Open the file read-only (never creating it) and read its schema's first page."""
    with closing(sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)) as conn:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
