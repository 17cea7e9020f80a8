"""Where each logical database and shard table lives for a given :class:`StorageSettings`.

MariaDB/MySQL: instance ``i`` of the topology uses ``urls[i % len(urls)]``; one engine per distinct
server URL, tables addressed schema-qualified (`` `tjobs_07`.`tasks_03` ``) so one connection reaches
every logical database of its server. SQLite: one file per logical database, ``DIR/tjobs_NN.db``,
one engine per file, unqualified table names. Database names are ``<database_prefix>_NN``.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from asyncmy.constants import CLIENT
from sqlalchemy import ColumnElement, MetaData, Table, and_, event, exc, tuple_
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sharding import Topology
from tjobs.errors import StorageUnavailable
from tjobs.settings import StorageSettings
from tjobs.stores.schema import (
    apps_table,
    flows_table,
    targets_table,
    task_counts_table,
    task_targets_table,
    task_targets_table_name,
    tasks_table,
)
from tjobs.stores.schema_accounts import api_tokens_table, console_sessions_table, users_table

MYSQL = "mysql"
SQLITE = "sqlite"
SQLITE_BUSY_TIMEOUT_MS = 10_000

# MySQL client/server error numbers meaning "the server could not be reached or dropped us".
_CONNECTION_ERRNOS = frozenset(
    {1040, 1045, 1053, 1152, 1158, 1159, 1160, 1161, 2002, 2003, 2005, 2006, 2013, 2014, 2026, 2055}
)
DEADLOCK_ERRNOS = frozenset({1213})


def keys_in(columns: Sequence[ColumnElement[Any]], keys: Sequence[Sequence[Any]]) -> ColumnElement[bool]:
    """The rows whose ``columns`` hold one of ``keys``: ``(a, b) IN ((…), …)``, but ``a = … AND b = …`` for
    one key. MariaDB (10.11) locates a one-element row list in a single-table ``UPDATE`` or ``DELETE``
    through no index (a ``SELECT`` makes it a constant) and reads the whole table
    (tests/contract/test_flow_writes_by_key.py, test_store_slo_contract.py)."""
    if len(keys) == 1:
        return and_(*(column == value for column, value in zip(columns, keys[0], strict=True)))
    return tuple_(*columns).in_(keys)


ROW_LOCK_WAIT_S = 2  # innodb_lock_wait_timeout of the engine's sessions (fire transactions, updates)
MULTI_STATEMENT_PARAMS = 20_000  # bound parameters per multi-statement round trip (MariaDB)

_Statement = TypeVar("_Statement")


def round_trips(
    statements: Sequence[_Statement],
    params_of: Callable[[_Statement], Sequence[Any]],
    max_params: int = MULTI_STATEMENT_PARAMS,
) -> list[list[_Statement]]:
    """Group statements, in order, into ``;``-joined round trips of about ``max_params`` parameters
    each (a group closes once it reaches the limit, so a single large statement is never split)."""
    groups: list[list[_Statement]] = []
    group: list[_Statement] = []
    size = 0
    for statement in statements:
        group.append(statement)
        size += len(params_of(statement))
        if size >= max_params:
            groups.append(group)
            group, size = [], 0
    if group:
        groups.append(group)
    return groups


_SQLITE_UNAVAILABLE = ("unable to open database file", "database is locked", "disk i/o error")


def dialect_of(url: str) -> str:
    backend = make_url(url).get_backend_name()
    if backend in ("mysql", "mariadb"):
        return MYSQL
    if backend == SQLITE:
        return SQLITE
    raise ValueError(f"unsupported storage URL {safe_url(url)!r}: use mysql+asyncmy:// or sqlite+aiosqlite://")


def safe_url(url: str | URL) -> str:
    """The URL as text with any password hidden, for messages and logs."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except exc.ArgumentError:
        return "<unparseable url>"
    return parsed.render_as_string(hide_password=True)


def database_name(prefix: str, database_index: int) -> str:
    return f"{prefix}_{database_index:02d}"


@dataclass(frozen=True, slots=True)
class DatabaseHome:
    """One logical database: its (prefixed) name and the engine URL that reaches it."""

    index: int
    name: str
    engine_url: str
    schema: str | None  # schema qualifier for its tables (None on SQLite: one file, one database)


@dataclass(frozen=True, slots=True)
class ShardTables:
    """One shard's tables (tasks, flows, which tasks name which target) and its database's task counts
    (``table_index`` is the shard's table in that database, its key there). The Core ``Table``
    objects are shared by every database (unqualified); ``options`` carries the
    ``schema_translate_map`` that points them at this shard's database, so compiled statements are
    cached per table shape, not per shard."""

    shard: int
    database: DatabaseHome
    tasks: Table
    flows: Table
    options: dict[str, Any]
    tasks_sql: str  # quoted, qualified name for hand-written SQL on the hot path
    flows_sql: str
    task_targets: Table
    task_targets_sql: str
    table_index: int
    task_counts: Table
    task_counts_sql: str


@dataclass(frozen=True)
class _Tables:
    """The Core ``Table`` objects of a layout with ``per_database`` tables per database: descriptions only,
    the same for every layout of that shape."""

    metadata: MetaData
    tasks: tuple[Table, ...]
    flows: tuple[Table, ...]
    task_targets: tuple[Table, ...]
    task_counts: Table
    apps: Table
    targets: Table
    users: Table
    api_tokens: Table
    console_sessions: Table


@functools.cache
def _tables(per_database: int) -> _Tables:
    """Built once per process and shape, not per :class:`Layout`: a layout of 16 tables per database took
    ~40 ms of CPU to build them (SQLAlchemy's ``Table`` and ``Index`` construction), and a store, a node's hot
    change log, ``migrate`` and a shard move each make layouts."""
    metadata = MetaData()
    tables = range(per_database)
    return _Tables(
        metadata,
        tuple(tasks_table(metadata, f"tasks_{t:02d}") for t in tables),
        tuple(flows_table(metadata, f"flows_{t:02d}") for t in tables),
        tuple(task_targets_table(metadata, task_targets_table_name(t)) for t in tables),
        task_counts_table(metadata),
        apps_table(metadata),
        targets_table(metadata),
        users_table(metadata),
        api_tokens_table(metadata),
        console_sessions_table(metadata),
    )


class Layout:
    """The mapping from shards to engines, databases and tables (pure; opens nothing). Its ``Table`` objects are
    shared with every layout of the same tables per database (:func:`_tables`)."""

    def __init__(self, settings: StorageSettings, placement: Sequence[str] | None = None) -> None:
        """``placement`` names the server of each logical database (a shard map's); without it, the
        configured list's seed: instance ``i`` on ``urls[i % len(urls)]``."""
        if not settings.urls:
            raise ValueError("storage.urls is empty")
        self.topology: Topology = settings.parsed_topology()
        self.prefix = settings.database_prefix
        kinds = {dialect_of(url) for url in settings.urls}
        if len(kinds) != 1:
            raise ValueError("storage.urls mixes SQLite and MySQL URLs")
        self.dialect = kinds.pop()
        shared = _tables(self.topology.tables_per_database)
        self.metadata = shared.metadata
        quote: Callable[[str], str] = (lambda n: f"`{n}`") if self.dialect == MYSQL else (lambda n: f'"{n}"')
        self.databases: list[DatabaseHome] = []
        servers = configured_servers(settings.urls)
        if placement is not None and len(placement) != self.topology.database_count:
            raise ValueError(f"a placement of {len(placement)} databases for topology {self.topology}")
        for index, (instance, _) in enumerate(self.topology.databases()):
            name = database_name(self.prefix, index)
            server = settings.urls[instance % len(settings.urls)]
            if placement is not None:
                if placement[index] not in servers:
                    raise ValueError(f"{name} is on {placement[index]}, which storage.urls does not list")
                server = servers[placement[index]]
            if self.dialect == MYSQL:
                home = DatabaseHome(index, name, _server_url(server), name)
            else:
                home = DatabaseHome(index, name, _sqlite_file_url(server, name), None)
            self.databases.append(home)
        task_tables, flow_tables, reference_tables = shared.tasks, shared.flows, shared.task_targets
        self.task_counts = shared.task_counts
        self.shards: list[ShardTables] = []
        for shard in self.topology.shards():
            location = self.topology.locate(shard)
            home = self.databases[location.database_index]
            qualifier = f"{quote(home.schema)}." if home.schema else ""
            self.shards.append(
                ShardTables(
                    shard,
                    home,
                    task_tables[location.table_index],
                    flow_tables[location.table_index],
                    self.options_for(home),
                    qualifier + quote(location.tasks_table),
                    qualifier + quote(location.flows_table),
                    reference_tables[location.table_index],
                    qualifier + quote(task_targets_table_name(location.table_index)),
                    location.table_index,
                    self.task_counts,
                    qualifier + quote(self.task_counts.name),
                )
            )
        self.apps_database = self.databases[0]
        self.apps = shared.apps
        self.targets = shared.targets
        self.users = shared.users
        self.api_tokens = shared.api_tokens
        self.console_sessions = shared.console_sessions
        self.apps_options = self.options_for(self.apps_database)

    @staticmethod
    def options_for(home: DatabaseHome) -> dict[str, Any]:
        return {"schema_translate_map": {None: home.schema}} if home.schema else {}

    def engine_urls(self) -> list[str]:
        return list(dict.fromkeys(home.engine_url for home in self.databases))

    def server_names(self) -> dict[str, str]:
        """Engine URL -> the server's name for logs, metrics and ``/v1/cluster`` (:func:`server_name`).
        MariaDB: one server per URL, made unique with ``#2``, ``#3`` … should two URLs name the same
        host and port. SQLite: every file of the data directory is one "server" (one disk)."""
        names: dict[str, str] = {}
        for url in self.engine_urls():
            name = base = server_name(url)
            copy = 1
            while self.dialect == MYSQL and name in names.values():
                copy += 1
                name = f"{base}#{copy}"
            names[url] = name
        return names


def configured_servers(urls: Sequence[str]) -> dict[str, str]:
    """Each configured URL by its server's name (:func:`server_name`), in the configured order. A
    URL listed twice is one server; two URLs of one MariaDB ``host:port`` are ``host:port`` and
    ``host:port#2`` (as :meth:`Layout.server_names` names them). SQLite: the data directory."""
    named: dict[str, str] = {}
    for url in dict.fromkeys(urls):
        mysql = dialect_of(url) == MYSQL
        name = base = server_name(url if mysql else _sqlite_file_url(url, "any"))
        copy = 1
        while name in named:
            copy += 1
            name = f"{base}#{copy}"
        named[name] = url
    return named


def server_name(url: str) -> str:
    """``host:port`` of a MariaDB server URL, the data directory of a SQLite file: never a credential."""
    parsed = make_url(url)
    if dialect_of(url) == MYSQL:
        return f"{parsed.host or '127.0.0.1'}:{parsed.port or 3306}"
    return os.path.dirname(parsed.database or "") or "."


def _server_url(url: str) -> str:
    """The server URL without a database, on the asyncmy driver, in utf8mb4."""
    parsed = make_url(url)
    query = dict(parsed.query)
    query.setdefault("charset", "utf8mb4")
    server = URL.create("mysql+asyncmy", parsed.username, parsed.password, parsed.host, parsed.port, None, query)
    return server.render_as_string(hide_password=False)


def _sqlite_file_url(url: str, name: str) -> str:
    directory = make_url(url).database or "."
    return f"sqlite+aiosqlite:///{os.path.join(directory, name + '.db')}"


def sqlite_path(engine_url: str) -> str:
    return make_url(engine_url).database or ""


def create_engine_for(url: str, settings: StorageSettings) -> AsyncEngine:
    if dialect_of(url) == MYSQL:
        return create_async_engine(
            url,
            pool_size=settings.pool_size,
            max_overflow=settings.pool_size,
            pool_recycle=3600,
            isolation_level="READ COMMITTED",
            connect_args={
                "connect_timeout": max(1, int(settings.connect_timeout_s)),
                # FOUND_ROWS as SQLAlchemy sets it (UPDATE counts matched rows); MULTI_STATEMENTS for
                # the fire transaction's single round trip (every value is a bound parameter).
                "client_flag": CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
                # A row lock held by a session that never finishes (a frozen former owner that the
                # new owner could not end) fails the waiting transaction soon, not after 50 s.
                "init_command": f"SET SESSION innodb_lock_wait_timeout = {ROW_LOCK_WAIT_S}",
            },
            query_cache_size=2000,
        )
    engine = create_async_engine(
        url,
        pool_size=settings.pool_size,
        max_overflow=settings.pool_size,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        query_cache_size=2000,
    )
    _configure_sqlite(engine)
    return engine


WRITE_OPTION = "tjobs_write"


def _configure_sqlite(engine: AsyncEngine) -> None:
    """WAL, a busy timeout, and real transactions: ``BEGIN IMMEDIATE`` for writers, ``BEGIN`` for readers.

    pysqlite's own implicit BEGIN is turned off (``isolation_level = None``) so SQLAlchemy's ``begin``
    decides; a writer takes the file's write lock up front and never deadlocks on an upgrade.
    """

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def mysql_errno(error: BaseException) -> int | None:
    """The MySQL error number of a SQLAlchemy-wrapped or a raw driver error, if it has one."""
    for candidate in (getattr(error, "orig", None), error):
        args = getattr(candidate, "args", ())
        if args and isinstance(args[0], int):
            return args[0]
    return None


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` means the database could not be reached (as opposed to a bad statement)."""
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, exc.TimeoutError | OSError | ConnectionError | TimeoutError):
        return True
    if isinstance(error, exc.InterfaceError):
        return True
    if not isinstance(error, exc.SQLAlchemyError) and mysql_errno(error) in _CONNECTION_ERRNOS:
        return True  # a raw driver error from the hot path (see sql_fire)
    if isinstance(error, exc.OperationalError):
        errno = mysql_errno(error)
        if errno is not None:
            return errno in _CONNECTION_ERRNOS or errno == 1205  # 1205: lock wait timeout
        orig = error.orig
        if isinstance(orig, sqlite3.OperationalError):
            return any(text in str(orig).lower() for text in _SQLITE_UNAVAILABLE)
        text = str(orig).lower()
        return any(s in text for s in _SQLITE_UNAVAILABLE) or "can't connect" in text
    return False


def unavailable(url: str, error: BaseException) -> StorageUnavailable:
    orig = getattr(error, "orig", None) or error
    return StorageUnavailable(f"database {safe_url(url)} is unavailable: {type(orig).__name__}: {orig}")
