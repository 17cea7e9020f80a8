"""The SQL store: SQLAlchemy Core over MariaDB/MySQL (asyncmy) or SQLite files (aiosqlite).

:mod:`tjobs.stores.sql_layout` maps shards to engines and tables, :mod:`tjobs.stores.schema` defines
the tables, :mod:`tjobs.stores.sql_fire` holds the fire transaction, and on MariaDB
:mod:`tjobs.stores.sql_direct` runs the API's inserts and reads by id or key on a raw autocommit
asyncmy pool (concurrent single creates are group-committed, one transaction per flush and each
caller answered after that commit, a refused row settled on its own; a batch create is one
transaction per server rather than per logical database; on SQLite, concurrent single creates are
group-committed the same way, one writer per file), and :mod:`tjobs.stores.sql_flow_updates`
writes the deliverer's batched flow outcomes as one multi-statement per server. On MariaDB the fire
transaction (one per server) and those outcome writes run on the server's fire pool (sql_direct), not
through the engine.
Every other call runs in one transaction per logical database; a database that cannot be reached
raises :class:`StorageUnavailable` naming its URL without the password.

A create (single or batch) waits at most ``storage.create_timeout_s`` for each server it writes to:
an item whose write was never sent answers ``StorageUnavailable`` (nothing stored), one whose write
was sent and not confirmed ``StorageOutcomeUnknown`` (it may have committed; the error names its id).
A batch answers per item: the shares of servers that answered are stored and reported as such.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, TypeVar

from asyncmy.errors import IntegrityError as DriverIntegrityError
from sqlalchemy import (
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    tuple_,
    union_all,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from sharding import TaskIdGenerator, shard_for_key, shard_of_task_id
from sharding.shard_map import ShardMap
from tjobs.errors import (
    Conflict,
    DuplicateKey,
    NotFound,
    StorageOutcomeUnknown,
    StorageUnavailable,
    TargetExists,
    TargetVersionConflict,
    TaskIdTaken,
    TjobsError,
    VersionConflict,
)
from tjobs.model import (
    App,
    DueTask,
    FireIntent,
    FireOutcome,
    Flow,
    FlowStatus,
    FlowUpdate,
    MisfirePolicy,
    SloCounts,
    SloMinute,
    Task,
    TaskStatus,
)
from tjobs.settings import StorageSettings
from tjobs.stores import sql_load, sql_search, sql_slo
from tjobs.stores.base import DEAD_LETTERS, FirePlanner, ServerSessions, TaskStore
from tjobs.stores.layout_record import ensure_layout
from tjobs.stores.queries import FlowPosition, FlowQuery, TaskPosition, TaskQuery
from tjobs.stores.schema import (
    app_from_row,
    app_to_row,
    clip_error,
    flow_from_row,
    flow_to_row,
    target_from_row,
    target_to_row,
    task_from_row,
    task_target_rows,
    task_to_row,
)
from tjobs.stores.shard_fence import (
    fence_statement,
    is_fenced,
    read_fence,
    read_recorded_map,
    stale,
    swap_recorded_map,
)
from tjobs.stores.sql_direct import (
    DirectPool,
    GroupCommit,
    HealthConnection,
    Outcome,
    WriteAbandoned,
    WriteAttempt,
    WriteOutcomeUnknown,
    by_shard,
    connect_kwargs,
    fire_connect_kwargs,
    unique_keys,
)
from tjobs.stores.sql_fenced import StatementResult, execute_fenced
from tjobs.stores.sql_fire import FireTransaction
from tjobs.stores.sql_flow_updates import ShardUpdate, plan_updates, write_flow_updates
from tjobs.stores.sql_layout import (
    MYSQL,
    WRITE_OPTION,
    DatabaseHome,
    Layout,
    ShardTables,
    configured_servers,
    create_engine_for,
    is_unavailable,
    safe_url,
    unavailable,
)
from tjobs.stores.sql_move import MoveRow, recorded_moves
from tjobs.stores.sql_sessions import SessionRegistry, kill_connections
from tjobs.stores.task_edits import check_fields, edited_row
from tjobs.targets.model import Target

T = TypeVar("T")
# a batch share's outcomes: (item index, the stored task, the id holding its key, or the item's error)
Settled = list[tuple[int, Task | int | StorageUnavailable]]
logger = logging.getLogger(__name__)

_OPEN = (FlowStatus.PENDING.value, FlowStatus.SENDING.value)
_TERMINAL = tuple(s.value for s in FlowStatus if s.terminal)
_INSERT_RETRIES = 3
_EDITED_COLUMNS = (
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
    "version",
    "revision",
)


class SQLAlchemyTaskStore(TaskStore):
    def __init__(self, settings: StorageSettings) -> None:
        self.settings = settings
        self.layout = Layout(settings)
        self.topology = self.layout.topology
        self._engines: dict[str, AsyncEngine] = {}
        self._writers: dict[str, AsyncEngine] = {}
        self._direct: dict[str, DirectPool] = {}  # MariaDB: the API's inserts and reads (sql_direct)
        self._fire_pools: dict[str, DirectPool] = {}  # MariaDB: fire transactions, outcome writes (sql_direct)
        self._health: dict[str, HealthConnection] = {}  # MariaDB: ping() outside the pools
        self._groups: dict[str, GroupCommit] = {}  # MariaDB: concurrent single inserts, per server
        self._server_names = self.layout.server_names()  # engine URL -> host:port (or file)
        self._server_urls: dict[str, str] = {}  # name -> the engine URL its ping uses (the first)
        for url, name in self._server_names.items():
            self._server_urls.setdefault(name, url)
        self._sessions: dict[str, SessionRegistry] = {}  # MariaDB: engine URL -> open session ids
        self._shard_map: ShardMap | None = None  # routing by the seed (the configured list) until given one
        self._fence_epoch = 0  # the epoch writes are made under (tjobs.stores.shard_fence)

    # ---- lifecycle ------------------------------------------------------------------------------

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
            self._health[url] = HealthConnection(kwargs)
            self._groups[url] = GroupCommit(
                functools.partial(self._write_group, url), max_flushes=max(1, self.settings.pool_size // 2)
            )
        elif self.layout.dialect != MYSQL:  # SQLite: one writer per file at a time anyway
            self._groups[url] = GroupCommit(functools.partial(self._write_group, url), max_flushes=1)

    async def check_layout(self) -> None:
        home = self.layout.apps_database
        where = f"database {home.name} on {safe_url(home.engine_url)}"
        try:
            await ensure_layout(self._engine(home.engine_url, write=True), self.layout, self.settings, where)
        except TjobsError:
            raise
        except Exception as error:
            if is_unavailable(error):
                raise unavailable(home.engine_url, error) from error
            raise

    async def close(self) -> None:
        engines = list(self._engines.values())
        direct = [*self._direct.values(), *self._fire_pools.values()]
        for health in self._health.values():
            health.close()
        self._health.clear()
        self._engines.clear()
        self._writers.clear()
        self._direct.clear()
        self._fire_pools.clear()
        self._groups.clear()
        self._sessions.clear()
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
        async with self._connect(url) as conn:
            await conn.execute(text("SELECT 1"))

    # ---- database servers ---------------------------------------------------------------------------

    def database_servers(self) -> list[str]:
        return list(self._server_urls)

    def server_of_shard(self, shard: int) -> str:
        return self._server_names[self._shard(shard).database.engine_url]

    def _url_of_server(self, server: str) -> str:
        try:
            return self._server_urls[server]
        except KeyError:
            raise ValueError(f"no database server named {server!r} in storage.urls") from None

    async def ping_server(self, server: str) -> None:
        await self._ping_url(self._url_of_server(server))

    # ---- the shard map: routing and the epoch fence ---------------------------------------------------

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

    async def database_now_ms(self) -> int:
        if self.layout.dialect != MYSQL:
            return time.time_ns() // 1_000_000  # embedded: the local clock is the database clock
        async with self._connect(self.layout.databases[0].engine_url) as conn:
            value = (await conn.execute(text("SELECT UNIX_TIMESTAMP(NOW(3)) * 1000"))).scalar_one()
        return int(value)

    # ---- connections ----------------------------------------------------------------------------

    def _engine(self, url: str, write: bool) -> AsyncEngine:
        engines = self._writers if write else self._engines
        try:
            return engines[url]
        except KeyError:
            raise RuntimeError("the store is not started; call start() first") from None

    @asynccontextmanager
    async def _connect(self, url: str) -> AsyncIterator[AsyncConnection]:
        """A connection for reads (a deferred transaction, rolled back at the end)."""
        try:
            async with self._engine(url, write=False).connect() as conn:
                yield conn
        except TjobsError:
            raise
        except Exception as error:
            if is_unavailable(error):
                raise unavailable(url, error) from error
            raise

    @asynccontextmanager
    async def _write(self, url: str) -> AsyncIterator[AsyncConnection]:
        """A write transaction, committed when the block exits cleanly (SQLite: ``BEGIN IMMEDIATE``)."""
        try:
            async with self._engine(url, write=True).begin() as conn:
                yield conn
        except TjobsError:
            raise
        except Exception as error:
            if is_unavailable(error):
                raise unavailable(url, error) from error
            if is_fenced(error):
                raise stale(f"a logical database on {self._server_names.get(url, url)}", self._fence_epoch) from error
            raise

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
        """Map a raw driver error of :mod:`sql_direct` like :meth:`_connect` maps SQLAlchemy's."""
        try:
            yield
        except (TjobsError, DriverIntegrityError):
            raise
        except Exception as error:
            if is_unavailable(error):
                raise unavailable(url, error) from error
            if is_fenced(error):
                raise stale(f"a logical database on {self._server_names.get(url, url)}", self._fence_epoch) from error
            raise

    def _shard(self, shard: int) -> ShardTables:
        if not 0 <= shard < self.topology.shard_count:
            raise ValueError(f"shard {shard} is outside 0..{self.topology.shard_count - 1}")
        return self.layout.shards[shard]

    def _shard_of_task(self, task_id: int) -> ShardTables | None:
        if task_id <= 0:
            return None
        shard = shard_of_task_id(task_id)
        return self.layout.shards[shard] if shard < self.topology.shard_count else None

    async def _per_database(self, jobs: dict[DatabaseHome, Awaitable[T]]) -> list[T]:
        return list(await asyncio.gather(*jobs.values()))

    # ---- apps -------------------------------------------------------------------------------------

    async def put_app(self, app: App) -> None:
        apps = self.layout.apps
        row = app_to_row(app)
        values = {k: v for k, v in row.items() if k != "id"}
        for _ in range(_INSERT_RETRIES):
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

    # ---- targets ----------------------------------------------------------------------------------

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

    # ---- tasks ------------------------------------------------------------------------------------

    def _check_routing(self, task: Task) -> ShardTables:
        home = self._shard_of_task(task.id)
        if home is None:
            raise ValueError(f"task id {task.id} names no shard of topology {self.topology}")
        if task.key is not None:
            key_shard = shard_for_key(task.app_id, task.key, self.topology.shard_count)
            if key_shard != home.shard:
                raise ValueError(f"task {task.id} has key {task.key!r} of shard {key_shard}, not {home.shard}")
        return home

    async def insert_task(self, task: Task) -> Task:
        home = self._check_routing(task)
        url = home.database.engine_url
        group = self._groups.get(url)
        timeout_s = self.settings.create_timeout_s
        try:
            if group is None:
                return await self._bounded(lambda attempt: self._insert_one(home, task, attempt))
            outcome = await group.insert(task, timeout_s)  # written with whatever else arrives meanwhile
        except (WriteAbandoned, WriteOutcomeUnknown) as error:
            raise self._create_failed(url, task.id, error) from error
        if isinstance(outcome, WriteAbandoned | WriteOutcomeUnknown):
            raise self._create_failed(url, task.id, outcome) from outcome
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, int):
            assert task.key is not None
            raise DuplicateKey(task.app_id, task.key, outcome)
        return outcome

    async def _write_group(self, url: str, tasks: list[Task], attempt: WriteAttempt) -> list[Outcome]:
        """A group commit: every new task of ``tasks`` in one transaction on ``url`` (a MariaDB server
        through sql_direct, or a SQLite file); if any row is refused, each task is settled on its own
        so that only that one fails."""
        direct = self._direct.get(url)
        outcomes = unique_keys(tasks, {})
        groups = by_shard(self.layout, [t for t in outcomes if isinstance(t, Task)])
        try:
            if direct is not None:
                async with self._direct_call(url):
                    await direct.insert_new(groups, self._fence_epoch, attempt)
            else:
                attempt.begin_send()
                async with self._write(url) as conn:
                    for home, new in groups:
                        await conn.execute(
                            insert(home.tasks), [task_to_row(t) for t in new], execution_options=home.options
                        )
                        await _insert_references(conn, home, new)
            return list(outcomes)
        except (TjobsError, WriteAbandoned, WriteOutcomeUnknown):
            raise  # unavailable, not sent, or sent and unconfirmed: so is each one
        except Exception:  # a refused row (key, id, data) or a deadlock: one by one
            pass
        settled: list[Outcome] = []
        for task in tasks:
            try:
                settled.append(await self._insert_one(self._check_routing(task), task))
            except DuplicateKey as duplicate:
                settled.append(duplicate.existing_task_id)
            except Exception as error:  # this task's own error, for its own caller
                settled.append(error)
        return settled

    async def _insert_one(self, home: ShardTables, task: Task, attempt: WriteAttempt | None = None) -> Task:
        url = home.database.engine_url
        direct = self._direct.get(url)
        if attempt is not None:
            attempt.begin_send()  # (before the connection is taken: a wait for one counts as sent)
        for _ in range(_INSERT_RETRIES):
            try:
                if direct is not None:
                    async with self._direct_call(url):
                        await direct.insert_task(home, task, self._fence_epoch)
                else:
                    async with self._write(url) as conn:
                        await conn.execute(insert(home.tasks), [task_to_row(task)], execution_options=home.options)
                        await _insert_references(conn, home, [task])
                return replace(task)
            except (sa_exc.IntegrityError, DriverIntegrityError) as error:
                await self._raise_insert_conflict(task, error)
        raise Conflict(f"task {task.id} could not be stored after {_INSERT_RETRIES} attempts; retry")

    async def _raise_insert_conflict(self, task: Task, error: Exception) -> None:
        """Explain a failed insert: the key is taken (DuplicateKey) or the id is (Conflict).

        Returns (so the caller retries) only if neither holds any more: the holder was just deleted.
        """
        if task.key is not None:
            existing = await self.find_task_by_key(task.app_id, task.key)
            if existing is not None:
                raise DuplicateKey(task.app_id, task.key, existing.id) from error
        if await self.get_task(task.id) is not None:
            raise TaskIdTaken(task.id) from error

    async def insert_tasks(self, tasks: Sequence[Task]) -> list[Task | int | StorageUnavailable]:
        by_database: dict[DatabaseHome, list[int]] = defaultdict(list)
        by_server: dict[str, list[int]] = defaultdict(list)  # MariaDB: one transaction per server
        for index, task in enumerate(tasks):
            database = self._check_routing(task).database
            if database.engine_url in self._direct:
                by_server[database.engine_url].append(index)
            else:
                by_database[database].append(index)
        shares: list[tuple[str, list[tuple[int, Task]], Callable[[WriteAttempt], Awaitable[Settled]]]] = []
        for home, indexes in by_database.items():
            items = [(i, tasks[i]) for i in indexes]
            shares.append((home.engine_url, items, functools.partial(self._insert_batch, home, items)))
        for url, indexes in by_server.items():
            items = [(i, tasks[i]) for i in indexes]
            shares.append((url, items, functools.partial(self._insert_server_batch, url, items)))
        settled = await asyncio.gather(*(self._insert_share(url, items, write) for url, items, write in shares))
        results: dict[int, Task | int | StorageUnavailable] = {}
        for share in settled:
            results.update(share)
        return [results[index] for index in range(len(tasks))]

    async def _insert_share(
        self, url: str, items: list[tuple[int, Task]], write: Callable[[WriteAttempt], Awaitable[Settled]]
    ) -> dict[int, Task | int | StorageUnavailable]:
        """One server's (or database's) share of a batch, bounded by ``storage.create_timeout_s``; if its
        server cannot be reached or does not answer in time, each of its items carries the error."""
        try:
            return dict(await self._bounded(write))
        except (StorageUnavailable, WriteAbandoned, WriteOutcomeUnknown) as error:
            return {index: self._create_failed(url, task.id, error) for index, task in items}

    async def _bounded(self, write: Callable[[WriteAttempt], Awaitable[T]]) -> T:
        """Run ``write`` for at most ``storage.create_timeout_s``: past it, raise :class:`WriteAbandoned`
        and close its gate if it sent nothing yet, else :class:`WriteOutcomeUnknown`. The write is not
        cancelled (a hung server would leave its connection mid-statement); it ends on its own."""
        timeout_s = self.settings.create_timeout_s
        loop = asyncio.get_running_loop()
        attempt = WriteAttempt(loop.time() + timeout_s)
        running = asyncio.ensure_future(write(attempt))
        try:
            return await asyncio.wait_for(asyncio.shield(running), timeout_s)
        except TimeoutError:
            running.add_done_callback(_log_late_write)
            if attempt.close():
                raise WriteAbandoned(f"not sent within {timeout_s:g} s") from None
            raise WriteOutcomeUnknown(f"sent and not confirmed within {timeout_s:g} s") from None

    def _create_failed(self, url: str, task_id: int, error: BaseException) -> StorageUnavailable:
        """The API's error for a create whose write failed with ``error`` (one of the store's own kinds)."""
        if isinstance(error, StorageUnavailable):
            return error
        server = self._server_names.get(url, safe_url(url))
        limit = f"storage.create_timeout_s: {self.settings.create_timeout_s:g} s"
        if isinstance(error, WriteOutcomeUnknown):
            return StorageOutcomeUnknown(task_id, f"database server {server}: {error} ({limit})")
        return StorageUnavailable(f"database server {server} did not answer ({error}; {limit}); nothing was stored")

    async def _insert_server_batch(self, url: str, items: list[tuple[int, Task]], attempt: WriteAttempt) -> Settled:
        """The server's share of a batch in one transaction (sql_direct); item by item if it conflicts."""
        direct = self._direct[url]
        tasks = [task for _, task in items]
        try:
            async with self._direct_call(url):
                taken = await direct.taken_keys(by_shard(self.layout, [t for t in tasks if t.key is not None]))
                outcomes = unique_keys(tasks, taken)
                await direct.insert_new(
                    by_shard(self.layout, [t for t in outcomes if isinstance(t, Task)]), self._fence_epoch, attempt
                )
            return [(index, outcome) for (index, _), outcome in zip(items, outcomes, strict=True)]
        except (TjobsError, WriteAbandoned, WriteOutcomeUnknown):
            raise
        except Exception:  # a concurrent writer took a key or an id, or a refused row
            pass
        return await self._settle_items(url, items)

    async def _settle_items(self, url: str, items: list[tuple[int, Task]]) -> Settled:
        """Each item of a share that conflicted as a whole, on its own: some may be stored before the
        server fails, so a storage error is the item's own."""
        settled: Settled = []
        for index, task in items:
            try:
                settled.append((index, await self._settle_item(task)))
            except (StorageUnavailable, WriteOutcomeUnknown) as error:
                settled.append((index, self._create_failed(url, task.id, error)))
        return settled

    async def _settle_item(self, task: Task) -> Task | int:
        """Insert one item of a batch that conflicted as a whole. Other items (and other servers'
        shares) may be committed already, so this item must not fail the batch for a taken id: it is
        stored under another id of the same shard instead (see ``TaskStore.insert_tasks``)."""
        for _ in range(_INSERT_RETRIES):
            try:
                return await self._insert_one(self._check_routing(task), task)
            except DuplicateKey as duplicate:
                return duplicate.existing_task_id
            except TaskIdTaken:
                task.id = TaskIdGenerator.remint(task.id)
        raise Conflict(f"task {task.name!r} found its id taken {_INSERT_RETRIES} times; retry")

    async def _insert_batch(self, home: DatabaseHome, items: list[tuple[int, Task]], attempt: WriteAttempt) -> Settled:
        """One transaction for the database's share of the batch; item by item if it conflicts."""
        by_shard: dict[int, list[tuple[int, Task]]] = defaultdict(list)
        for index, task in items:
            by_shard[shard_of_task_id(task.id)].append((index, task))
        attempt.begin_send()
        try:
            async with self._write(home.engine_url) as conn:
                staged: dict[int, Task | int] = {}
                for shard, shard_items in sorted(by_shard.items()):
                    await self._insert_shard_items(conn, self.layout.shards[shard], shard_items, staged)
            return list(staged.items())
        except sa_exc.IntegrityError:
            pass  # a concurrent writer took a key or an id: settle each item on its own
        return await self._settle_items(home.engine_url, items)

    async def _insert_shard_items(
        self,
        conn: AsyncConnection,
        home: ShardTables,
        items: list[tuple[int, Task]],
        staged: dict[int, Task | int],
    ) -> None:
        tasks_t = home.tasks
        keyed = {(t.app_id, t.key) for _, t in items if t.key is not None}
        taken: dict[tuple[str, str], int] = {}
        if keyed:
            rows = await conn.execute(
                select(tasks_t.c.app_id, tasks_t.c.idem_key, tasks_t.c.id).where(
                    tuple_(tasks_t.c.app_id, tasks_t.c.idem_key).in_(sorted(keyed))
                ),
                execution_options=home.options,
            )
            taken = {(row.app_id, row.idem_key): int(row.id) for row in rows}
        new_rows: list[dict[str, Any]] = []
        new_tasks: list[Task] = []
        for index, task in items:
            if task.key is not None and (task.app_id, task.key) in taken:
                staged[index] = taken[(task.app_id, task.key)]
                continue
            if task.key is not None:
                taken[(task.app_id, task.key)] = task.id  # a later item with the same key gets this id
            staged[index] = replace(task)
            new_rows.append(task_to_row(task))
            new_tasks.append(task)
        if new_rows:
            await conn.execute(insert(tasks_t), new_rows, execution_options=home.options)
            await _insert_references(conn, home, new_tasks)

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
        mutable = (
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
        statement = (
            update(tasks_t)
            .where(tasks_t.c.id == task.id, tasks_t.c.version == expected_version)
            .values({**{name: row[name] for name in mutable}, "version": expected_version + 1})
        )
        async with self._write(home.database.engine_url) as conn:
            result = await self._fenced(conn, home.database, statement, home.options)
            stored = await self._read_task(conn, home, task.id)
            if result.rowcount == 1 and stored is not None:
                await _replace_references(conn, home, stored)
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
                await _replace_references(conn, home, edited)
        return edited

    async def delete_task(self, task_id: int) -> bool:
        home = self._shard_of_task(task_id)
        if home is None:
            return False
        async with self._write(home.database.engine_url) as conn:
            statement = delete(home.tasks).where(home.tasks.c.id == task_id)
            result = await self._fenced(conn, home.database, statement, home.options)
            if result.rowcount:
                await _delete_references(conn, home, [task_id])
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
            await _delete_references(conn, home, [task_id])
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
            await _delete_references(conn, home, task_ids)
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

    # ---- loading ----------------------------------------------------------------------------------

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
        statement = self.load_due_statement(shard, before_ms, limit, after, skip)
        async with self._connect(url) as conn:
            rows = await conn.execute(statement, execution_options=home.options)
            return [
                DueTask(int(r.id), int(r.next_run_at), int(r.version), r.app_id, MisfirePolicy(r.misfire_policy))
                for r in rows
            ]

    def load_due_statement(
        self,
        shard: int,
        before_ms: int,
        limit: int,
        after: tuple[int, int] | None = None,
        skip: tuple[int, int] | None = None,
    ) -> Any:
        """The cycle-load query (:meth:`load_due`), exposed so tests can EXPLAIN it. A MariaDB server
        with a direct pool runs the same statement as text (:func:`sql_load.load_due_query`)."""
        c = self._shard(shard).tasks.c
        statement = select(c.id, c.next_run_at, c.version, c.app_id, c.misfire_policy).where(
            c.status == "active", c.next_run_at < before_ms
        )
        if skip is not None:
            skip_from_ms, skip_until_ms = skip
            # two ranges of (status, next_run_at): below the span and from its end
            statement = statement.where(or_(c.next_run_at < skip_from_ms, c.next_run_at >= skip_until_ms))
        if after is not None:
            after_at, after_id = after
            # The redundant lower bound keeps this a range scan of (status, next_run_at).
            statement = statement.where(
                c.next_run_at >= after_at,
                or_(c.next_run_at > after_at, and_(c.next_run_at == after_at, c.id > after_id)),
            )
        return statement.order_by(c.next_run_at, c.id).limit(limit)

    async def count_active(self, shard: int) -> int:
        home = self._shard(shard)
        statement = select(func.count()).select_from(home.tasks).where(home.tasks.c.status == "active")
        async with self._connect(home.database.engine_url) as conn:
            return int((await conn.execute(statement, execution_options=home.options)).scalar_one())

    # ---- the fire transaction -------------------------------------------------------------------

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
        fire = FireTransaction(self.layout.dialect, intents, items, now_ms, planner, may_commit, epoch)
        committed = 0
        pool = self._fire_pools.get(url)
        try:
            await fire.run(pool.transaction if pool is not None else lambda: self._engine(url, write=True).begin())
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
            elif not isinstance(error, TjobsError) and is_unavailable(error):
                failure = unavailable(url, error)
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

    # ---- flows --------------------------------------------------------------------------------------

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
            async with self._direct_call(url), pool.transaction() as conn:
                await write_flow_updates(conn, shards, self.layout.shards, now_ms, fence)
            return
        async with self._write(url) as conn:
            await write_flow_updates(conn, shards, self.layout.shards, now_ms, fence)

    async def _record_updates(self, database: DatabaseHome, shards: dict[int, list[FlowUpdate]], now_ms: int) -> None:
        # One UPDATE per shard table, each row's values by CASE on its key (sql_flow_updates.plan_updates).
        async with self._write(database.engine_url) as conn:
            for plan in plan_updates(shards):
                home = self.layout.shards[plan.shard]
                c = home.flows.c
                values: dict[str, Any] = dict(zip(plan.columns, plan.values, strict=True))
                for column, pairs in plan.per_row:  # a row given no value keeps its own: else_ the column
                    values[column] = _by_key(plan, c, pairs, c[column])
                values["updated_at"] = now_ms
                where: list[ColumnElement[bool]] = [
                    tuple_(c.task_id, c.scheduled_at).in_(plan.keys),
                    c.status.in_(_OPEN),
                ]
                if isinstance(plan.guard, int):
                    where.append(c.attempts <= plan.guard)  # an open outcome never lowers the count
                elif plan.guard is not None:
                    where.append(c.attempts <= _by_key(plan, c, plan.guard, c.attempts))
                statement = update(home.flows).where(*where).values(values)
                await conn.execute(statement, execution_options=home.options)

    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None:
        home = self._shard_of_task(task_id)
        if home is None:
            return None
        c = home.flows.c
        statement = select(home.flows).where(c.task_id == task_id, c.scheduled_at == scheduled_at_ms)
        async with self._connect(home.database.engine_url) as conn:
            row = (await conn.execute(statement, execution_options=home.options)).mappings().first()
        return None if row is None else flow_from_row(row)

    async def list_flows(self, task_id: int, limit: int, before_scheduled_at_ms: int | None = None) -> list[Flow]:
        home = self._shard_of_task(task_id)
        if home is None:
            return []
        c = home.flows.c
        statement = select(home.flows).where(c.task_id == task_id)
        if before_scheduled_at_ms is not None:
            statement = statement.where(c.scheduled_at < before_scheduled_at_ms)
        statement = statement.order_by(c.scheduled_at.desc()).limit(limit)
        async with self._connect(home.database.engine_url) as conn:
            rows = await conn.execute(statement, execution_options=home.options)
            return [flow_from_row(row) for row in rows.mappings()]

    async def list_flows_by_status(
        self,
        shard: int,
        status: FlowStatus,
        app_id: str | None,
        limit: int,
        after: tuple[int, int] | None = None,
    ) -> list[Flow]:
        home = self._shard(shard)
        c = home.flows.c
        statement = select(home.flows).where(c.status == status.value)
        if app_id is not None:
            statement = statement.where(c.app_id == app_id)
        if after is not None:
            after_task, after_at = after
            statement = statement.where(
                c.task_id >= after_task,
                or_(c.task_id > after_task, and_(c.task_id == after_task, c.scheduled_at > after_at)),
            )
        statement = statement.order_by(c.task_id, c.scheduled_at).limit(limit)
        async with self._connect(home.database.engine_url) as conn:
            rows = await conn.execute(statement, execution_options=home.options)
            return [flow_from_row(row) for row in rows.mappings()]

    async def search_flows(
        self, query: FlowQuery, reads: Mapping[int, FlowPosition | None], limit: int
    ) -> dict[int, list[Flow]]:
        return await sql_search.search_flows(self._shard, self._connect, query, reads, limit)

    async def search_tasks(
        self, query: TaskQuery, reads: Mapping[int, TaskPosition | None], limit: int
    ) -> dict[int, list[Task]]:
        return await sql_search.search_tasks(self._shard, self._connect, query, reads, limit)

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

    async def count_by_app(self, database_index: int) -> dict[str, dict[str, int]]:
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
        async with self._connect(homes[0].database.engine_url) as conn:
            rows = await conn.execute(union_all(*parts), execution_options=homes[0].options)
            for app_id, status, count in rows:
                of_app = counts.setdefault(str(app_id), {})
                of_app[str(status)] = of_app.get(str(status), 0) + int(count)
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

    async def shards_with_stale_flows(self, shards: Sequence[int], now_ms: int) -> set[int]:
        # One statement per database: SELECT <shard> WHERE EXISTS (an open flow due), UNION ALL over
        # its shards. Each EXISTS is a range probe of (status, next_attempt_at).
        by_database: dict[str, list[ShardTables]] = {}
        for shard in shards:
            home = self._shard(shard)
            by_database.setdefault(home.database.name, []).append(home)

        async def probe(homes: list[ShardTables]) -> set[int]:
            parts = [
                select(literal(home.shard).label("shard")).where(
                    exists().where(home.flows.c.status.in_(_OPEN), home.flows.c.next_attempt_at <= now_ms)
                )
                for home in homes
            ]
            statement = parts[0] if len(parts) == 1 else union_all(*parts)
            async with self._connect(homes[0].database.engine_url) as conn:
                rows = await conn.execute(statement, execution_options=homes[0].options)
                return {int(row[0]) for row in rows}

        stale: set[int] = set()
        for homes in by_database.values():  # one at a time: a pass must not take the fire path's connections
            stale |= await probe(homes)
        return stale

    async def lease_stale_flows(
        self, shard: int, now_ms: int, lease_ms: int, limit: int
    ) -> list[tuple[Flow, Task | None]]:
        home = self._shard(shard)
        c = home.flows.c
        lease_until = now_ms + lease_ms
        async with self._write(home.database.engine_url) as conn:
            # One query per open status: each is an ordered range scan of (status, next_attempt_at)
            # (the primary key breaks ties), so MariaDB locks only the rows it returns and a
            # concurrent caller skips them (SKIP LOCKED) instead of waiting or sharing them.
            rows: list[Any] = []
            for position, status in enumerate(_OPEN):
                pick = (
                    select(home.flows)
                    .where(c.status == status, c.next_attempt_at <= now_ms)
                    .order_by(c.next_attempt_at, c.task_id, c.scheduled_at)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                )
                if position == 0:  # the transaction's first statement passes the shard-map fence
                    rows += (await self._fenced(conn, home.database, pick, home.options)).mappings()
                else:
                    rows += (await conn.execute(pick, execution_options=home.options)).mappings().all()
            rows.sort(key=lambda r: (r["next_attempt_at"], r["task_id"], r["scheduled_at"]))
            rows = rows[:limit]
            if not rows:
                return []
            flows = [replace(flow_from_row(row), next_attempt_at_ms=lease_until) for row in rows]
            task_ids = sorted({f.task_id for f in flows})
            task_rows = await conn.execute(
                select(home.tasks).where(home.tasks.c.id.in_(task_ids)), execution_options=home.options
            )
            tasks = {task.id: task for task in (task_from_row(row) for row in task_rows.mappings())}
            # A pending flow of a live task is about to be re-driven: count the attempt whose outcome
            # may have been lost (see the contract), in the statement that takes the lease.
            for flow in flows:
                if flow.status is FlowStatus.PENDING and flow.task_id in tasks:
                    flow.attempts += 1
            counted = {
                (f.task_id, f.scheduled_at_ms) for f in flows if f.status is FlowStatus.PENDING and f.task_id in tasks
            }
            keys = [(f.task_id, f.scheduled_at_ms) for f in flows]
            await conn.execute(
                update(home.flows)
                .where(tuple_(c.task_id, c.scheduled_at).in_(keys))
                .values(
                    next_attempt_at=lease_until,
                    attempts=c.attempts + case((tuple_(c.task_id, c.scheduled_at).in_(sorted(counted)), 1), else_=0)
                    if counted
                    else c.attempts,
                ),
                execution_options=home.options,
            )
        return [(flow, tasks.get(flow.task_id)) for flow in flows]

    # ---- service levels (tjobs/stores/sql_slo.py) -----------------------------------------------------

    async def add_slo_minutes(self, node_id: str, minutes: Sequence[SloMinute]) -> None:
        if minutes:
            async with self._write(self.layout.apps_database.engine_url) as conn:
                await sql_slo.add_minutes(conn, self.layout.apps_options, node_id, minutes)

    async def sum_slo_minutes(self, app_id: str | None, from_minute: int, to_minute: int) -> SloCounts:
        async with self._connect(self.layout.apps_database.engine_url) as conn:
            return await sql_slo.sum_minutes(conn, self.layout.apps_options, app_id, from_minute, to_minute)

    async def purge_slo_minutes(self, before_minute: int, limit: int) -> int:
        async with self._write(self.layout.apps_database.engine_url) as conn:
            return await sql_slo.purge_minutes(conn, self.layout.apps_options, before_minute, limit)

    # ---- retention ----------------------------------------------------------------------------------

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
                    await _delete_references(conn, home, list(old_tasks))
        return purged


def _log_late_write(write: asyncio.Future[Any]) -> None:
    """A create's write that ended after its caller stopped waiting: say how (its outcome was unknown)."""
    if write.cancelled():
        return
    error = write.exception()
    if error is not None and not isinstance(error, WriteAbandoned):
        logger.warning(
            "a create's write failed after its caller was answered: %r", error, extra={"action": "late_write"}
        )


def _by_key(plan: ShardUpdate, c: Any, pairs: Sequence[tuple[tuple[int, int], Any]], otherwise: Any) -> Any:
    """``CASE`` on a flow row's key giving each key of ``pairs`` its value, ``otherwise`` for the rest."""
    if plan.by_task:  # no two rows share a task: its id alone tells them apart
        return case({task_id: value for (task_id, _), value in pairs}, value=c.task_id, else_=otherwise)
    whens = [(and_(c.task_id == task_id, c.scheduled_at == at_ms), value) for (task_id, at_ms), value in pairs]
    return case(*whens, else_=otherwise)


def _ids() -> Any:
    """The expanding ``ids`` parameter of a statement over a list of task ids."""
    return bindparam("ids", expanding=True)


# ---- which tasks name which target (task_targets_TT), always in the task's own transaction --------


async def _insert_references(conn: AsyncConnection, home: ShardTables, tasks: Sequence[Task]) -> None:
    rows = [row for task in tasks for row in task_target_rows(task)]
    if rows:
        await conn.execute(insert(home.task_targets), rows, execution_options=home.options)


async def _delete_references(conn: AsyncConnection, home: ShardTables, task_ids: list[int]) -> None:
    r = home.task_targets.c
    await conn.execute(
        delete(home.task_targets).where(r.task_id.in_(bindparam("task_ids", expanding=True))),
        {"task_ids": task_ids},
        execution_options=home.options,
    )


async def _replace_references(conn: AsyncConnection, home: ShardTables, task: Task) -> None:
    await _delete_references(conn, home, [task.id])
    await _insert_references(conn, home, [task])
