"""``tjobs migrate`` on new MariaDB databases, for tests: a reused set of this process's, put back as migrated.

Migrating a 2x2x4 layout's four logical databases (26 Alembic revisions, ~75 tables) and dropping them
took 1.2-1.5 s of wall time a test at load ~3 and ~5 s at load ~8. :func:`fresh_mariadb` instead keeps,
per process (xdist worker) and layout, sets of databases under prefixes of its own (``tjobsrw_<hex>``): the first is
migrated and its state snapshotted (each table's ``SHOW CREATE TABLE``, which carries its columns,
indexes, CHECK constraints, options and ``AUTO_INCREMENT``; its persistent InnoDB statistics; the rows
``migrate`` wrote: schema revision, layout record, shard map, fences; the triggers), and each later test
gets a released set put back to that state ("wipe/restore"): every row deleted and the snapshot's rows
inserted, any table whose definition or statistics differ from the snapshot (a test altered it, or ran
``ANALYZE``) or that held rows besides the snapshot's (deleted rows stay on their pages until purge frees
them, and the server's own recount in between, ``innodb_stats_auto_recalc``, would count those pages)
dropped and created again from its text with the snapshot's statistics (:func:`_copy_stats`:
a migrated table that held rows at a copying ``ALTER`` counts them), an ``AUTO_INCREMENT`` a test advanced
set back, tables, views and triggers the snapshot lacks dropped, a database holding routines or events
created anew. Measured on the shared server at load 8-11: creating a set from the texts cost 0.7-1.9 s
and dropping it 0.4-0.7 s, the wipe/restore 0.1-0.3 s (a fresh migration 5-7 s). A set in use by a test
is not reused (a second one is created from the texts); a set whose restore fails (a lock a leaked
connection holds, past ``LOCK_WAIT_S``) is left and dropped at exit.

The only prefix-dependent row is the layout record's ``database_prefix``, rewritten for each set (the
snapshot refuses any other recorded value that names the prefix); the shard map names servers
(``host:port``), the same for every set of the layout. The layout key is the storage settings but the
prefix and the connection's (pool size, timeouts), and a digest of the migration files: should those
change, the next call migrates anew. Settings that are not MariaDB go to
:func:`tjobs.stores.migrate.migrate` itself.
``tests/integration/test_mariadb_template.py`` holds a reused set equal to a fresh migration.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from testkit.databases import connect_mysql
from tjobs.settings import StorageSettings
from tjobs.stores import migrate as migrate_module
from tjobs.stores.schema import LAYOUT_TABLE
from tjobs.stores.sql_layout import MYSQL, DatabaseHome, Layout, dialect_of

LOCK_WAIT_S = 10  # a restore waits this long for a lock a leaked connection of an earlier test holds
PREFIX = "tjobsrw"
# Settings that change how a set is reached, never what migrate writes (it opens a pool of its own size)
CONNECTION_ONLY = {"database_prefix", "pool_size", "connect_timeout_s", "create_timeout_s"}
_AUTO_INCREMENT = re.compile(r" AUTO_INCREMENT=(\d+)")


@dataclass(frozen=True)
class TableState:
    """One table as ``migrate`` left it."""

    create: str  # SHOW CREATE TABLE
    columns: tuple[str, ...]  # the columns a row is written with (not the generated ones)
    rows: tuple[tuple[Any, ...], ...]
    stats: tuple[tuple[Any, ...], ...]  # persistent InnoDB statistics: the table's and each index's

    @property
    def auto_increment(self) -> int:
        found = _AUTO_INCREMENT.search(self.create)
        return int(found.group(1)) if found else 1


@dataclass(frozen=True)
class DatabaseState:
    collation: str
    tables: dict[str, TableState]
    triggers: tuple[tuple[Any, ...], ...]  # information_schema.TRIGGERS' facts, by name
    trigger_sql: tuple[str, ...]  # SHOW CREATE TRIGGER's statements, in the same order


@dataclass
class Template:
    prefix: str  # the set the snapshot was taken of: its layout record names this prefix
    databases: list[DatabaseState]  # by logical database index
    free: list[str] = field(default_factory=list)
    leased: set[str] = field(default_factory=set)
    abandoned: list[StorageSettings] = field(default_factory=list)
    made: list[StorageSettings] = field(default_factory=list)


_TEMPLATES: dict[str, Template] = {}


def reusable(settings: StorageSettings) -> bool:
    return bool(settings.urls) and all(dialect_of(url) == MYSQL for url in settings.urls)


async def fresh_mariadb(settings: StorageSettings) -> StorageSettings:
    """Settings naming a set of logical databases that holds what ``migrate(settings)`` makes of new
    ones, under a prefix of this process's (``settings.database_prefix`` is replaced); give the set back
    with :func:`release_mariadb`. Not MariaDB: ``migrate(settings)``, and ``settings`` as they are."""
    if not reusable(settings):
        await migrate_module.migrate(settings)
        return settings
    key = layout_key(settings)
    template = _TEMPLATES.get(key)
    if template is None:
        made = _named(settings, _new_prefix())
        await migrate_module.migrate(made)
        template = Template(made.database_prefix, await asyncio.to_thread(snapshot, made))
        template.made.append(made)
        _TEMPLATES[key] = template
        template.leased.add(made.database_prefix)
        return made
    while template.free:
        reused = _named(settings, template.free.pop())
        try:
            await asyncio.to_thread(restore, template, reused)
        except Exception:  # a set that cannot be put back is left for the exit's drop
            template.abandoned.append(reused)
            continue
        template.leased.add(reused.database_prefix)
        return reused
    made = _named(settings, _new_prefix())
    template.made.append(made)
    await asyncio.to_thread(restore, template, made)
    template.leased.add(made.database_prefix)
    return made


def release_mariadb(settings: StorageSettings) -> None:
    """Give back a set :func:`fresh_mariadb` handed out (its connections closed): the next call reuses it."""
    for template in _TEMPLATES.values():
        if settings.database_prefix in template.leased:
            template.leased.discard(settings.database_prefix)
            template.free.append(settings.database_prefix)


def layout_key(settings: StorageSettings) -> str:
    """What decides a set's schema and rows but its prefix: the settings, and the migration files."""
    digest = hashlib.sha256()
    directory = migrate_module.MIGRATIONS_DIR
    for path in sorted(directory.rglob("*.py")):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    facts = settings.model_dump(mode="json", exclude=CONNECTION_ONLY)
    facts["topology"] = str(settings.parsed_topology())
    return json.dumps(facts, sort_keys=True) + digest.hexdigest()


def _new_prefix() -> str:
    return f"{PREFIX}_{secrets.token_hex(4)}"


def _named(settings: StorageSettings, prefix: str) -> StorageSettings:
    return settings.model_copy(update={"database_prefix": prefix})


# ---- the snapshot ----------------------------------------------------------------------------------


@contextmanager
def server(url: str) -> Iterator[Any]:
    """A cursor on one connection to the server of ``url`` (not pooled: closed on leaving)."""
    from pymysql.constants import CLIENT

    connection = connect_mysql(url, charset="utf8mb4", autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SET SESSION lock_wait_timeout = {LOCK_WAIT_S}, innodb_lock_wait_timeout = {LOCK_WAIT_S}")
            yield cursor
    finally:
        connection.close()


def _by_server(layout: Layout) -> dict[str, list[DatabaseHome]]:
    homes: dict[str, list[DatabaseHome]] = {}
    for home in layout.databases:
        homes.setdefault(home.engine_url, []).append(home)
    return homes


def snapshot(settings: StorageSettings) -> list[DatabaseState]:
    """What ``migrate`` left in the databases of ``settings`` (just migrated), by logical database."""
    layout = Layout(settings)
    states: dict[int, DatabaseState] = {}
    for url, homes in _by_server(layout).items():
        with server(url) as cursor:
            for home in homes:
                states[home.index] = _database_state(cursor, home.name, settings.database_prefix)
    return [states[index] for index in range(len(layout.databases))]


def _database_state(cursor: Any, name: str, prefix: str) -> DatabaseState:
    for kind, query in (
        ("routines", "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s"),
        ("events", "SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s"),
        ("views", "SELECT TABLE_NAME FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s"),
    ):
        cursor.execute(query, (name,))
        if cursor.fetchall():
            raise NotImplementedError(f"migrate made {kind} in {name}: teach testkit/mariadb_template.py to copy them")
    cursor.execute("SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (name,))
    (collation,) = cursor.fetchone()
    creates = _creates(cursor, name)
    stats = _stats(cursor, name)
    cursor.execute(
        "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND IS_GENERATED = 'NEVER' ORDER BY TABLE_NAME, ORDINAL_POSITION",
        (name,),
    )
    columns: dict[str, list[str]] = {}
    for table, column in cursor.fetchall():
        columns.setdefault(table, []).append(column)
    tables: dict[str, TableState] = {}
    for table, create in creates.items():
        listed = ", ".join(f"`{column}`" for column in columns[table])
        cursor.execute(f"SELECT {listed} FROM `{name}`.`{table}` ORDER BY 1")
        rows = tuple(tuple(row) for row in cursor.fetchall())
        _check_prefix_free(name, table, columns[table], rows, prefix)
        tables[table] = TableState(create, tuple(columns[table]), rows, stats.get(table, ()))
    triggers = _triggers(cursor, name)
    statements = []
    for trigger in triggers:
        cursor.execute(f"SHOW CREATE TRIGGER `{name}`.`{trigger[0]}`")
        statements.append(str(cursor.fetchone()[2]))
    return DatabaseState(str(collation), tables, triggers, tuple(statements))


def _check_prefix_free(name: str, table: str, columns: list[str], rows: Any, prefix: str) -> None:
    """Refuse a recorded value naming the prefix other than the layout record's (rewritten per set)."""
    for row in rows:
        record = dict(zip(columns, row, strict=True))
        if table == LAYOUT_TABLE and record.get("name") == "database_prefix":
            continue
        if any(prefix in str(value) for value in row):
            raise NotImplementedError(f"{name}.{table} records the prefix in {row!r}: rewrite it per set")


def _creates(cursor: Any, name: str) -> dict[str, str]:
    cursor.execute(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE' "
        "ORDER BY TABLE_NAME",
        (name,),
    )
    tables = [str(table) for (table,) in cursor.fetchall()]
    if not tables:
        return {}
    cursor.execute(";".join(f"SHOW CREATE TABLE `{name}`.`{table}`" for table in tables))
    creates: dict[str, str] = {}
    for table in tables:
        (shown, create) = cursor.fetchone()
        assert shown == table, (shown, table)
        creates[table] = str(create)
        cursor.nextset()
    return creates


def _stats(cursor: Any, name: str) -> dict[str, tuple[tuple[Any, ...], ...]]:
    cursor.execute(
        "SELECT table_name, '', 'n_rows', n_rows FROM mysql.innodb_table_stats WHERE database_name = %s "
        "UNION ALL SELECT table_name, '', 'clustered_index_size', clustered_index_size "
        "FROM mysql.innodb_table_stats WHERE database_name = %s "
        "UNION ALL SELECT table_name, '', 'sum_of_other_index_sizes', sum_of_other_index_sizes "
        "FROM mysql.innodb_table_stats WHERE database_name = %s "
        "UNION ALL SELECT table_name, index_name, stat_name, stat_value FROM mysql.innodb_index_stats "
        "WHERE database_name = %s ORDER BY 1, 2, 3",
        (name, name, name, name),
    )
    stats: dict[str, list[tuple[Any, ...]]] = {}
    for table, *rest in cursor.fetchall():
        stats.setdefault(str(table), []).append(tuple(rest))
    return {table: tuple(rows) for table, rows in stats.items()}


def _triggers(cursor: Any, name: str) -> tuple[tuple[Any, ...], ...]:
    cursor.execute(
        "SELECT TRIGGER_NAME, EVENT_MANIPULATION, EVENT_OBJECT_TABLE, ACTION_TIMING, ACTION_ORDER, "
        "ACTION_STATEMENT, SQL_MODE FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s "
        "ORDER BY TRIGGER_NAME",
        (name,),
    )
    return tuple(tuple(row) for row in cursor.fetchall())


# ---- putting a set back ----------------------------------------------------------------------------


def restore(template: Template, settings: StorageSettings) -> None:
    """Make the databases of ``settings`` hold the template's snapshot (created where missing)."""
    layout = Layout(settings)
    for url, homes in _by_server(layout).items():
        with server(url) as cursor:
            for home in homes:
                _restore_database(cursor, home.name, template.databases[home.index], template.prefix, layout.prefix)


def _restore_database(cursor: Any, name: str, state: DatabaseState, recorded: str, prefix: str) -> None:
    cursor.execute("SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (name,))
    found = cursor.fetchone()
    if found is not None:
        for query in (
            "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s",
            "SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s",
        ):
            cursor.execute(query, (name,))
            if cursor.fetchall():
                found = None
    if found is None or found[0] != state.collation:
        charset = state.collation.split("_")[0]
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET {charset} COLLATE {state.collation}")
    cursor.execute(
        "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
        (name,),
    )
    present = {str(table): str(kind) for table, kind in cursor.fetchall()}
    for trigger in _triggers(cursor, name):
        if trigger not in state.triggers:
            cursor.execute(f"DROP TRIGGER `{name}`.`{trigger[0]}`")
    for table, kind in present.items():
        if table not in state.tables or kind != "BASE TABLE":
            cursor.execute(f"DROP {'VIEW' if kind == 'VIEW' else 'TABLE'} `{name}`.`{table}`")
    kept = [table for table in state.tables if present.get(table) == "BASE TABLE"]
    deleted: dict[str, int] = {}
    if kept:
        cursor.execute(";".join(f"DELETE FROM `{name}`.`{table}`" for table in kept))
        deleted[kept[0]] = cursor.rowcount
        for table in kept[1:]:
            cursor.nextset()
            deleted[table] = cursor.rowcount
        while cursor.nextset():
            pass
    creates = _creates(cursor, name)
    stats = _stats(cursor, name)
    made = []
    for table, wanted in state.tables.items():
        create = creates.get(table)
        if (
            create is not None
            and create != wanted.create
            and _AUTO_INCREMENT.sub("", create) == _AUTO_INCREMENT.sub("", wanted.create)
        ):
            cursor.execute(f"ALTER TABLE `{name}`.`{table}` AUTO_INCREMENT = {wanted.auto_increment}")
            create = _creates(cursor, name)[table]
        if create != wanted.create or stats.get(table, ()) != wanted.stats or deleted.get(table, 0) > len(wanted.rows):
            cursor.execute(f"DROP TABLE IF EXISTS `{name}`.`{table}`")
            cursor.execute(f"USE `{name}`")
            cursor.execute("SET SESSION foreign_key_checks = 0")
            cursor.execute(wanted.create)
            cursor.execute("SET SESSION foreign_key_checks = 1")
            made.append(table)
        if wanted.rows:
            rows = [_rewritten(table, wanted.columns, row, recorded, prefix) for row in wanted.rows]
            listed = ", ".join(f"`{column}`" for column in wanted.columns)
            marks = ", ".join(["%s"] * len(wanted.columns))
            cursor.executemany(f"INSERT INTO `{name}`.`{table}` ({listed}) VALUES ({marks})", rows)
    if made:
        _copy_stats(cursor, name, {table: state.tables[table] for table in made})
    if _triggers(cursor, name) != state.triggers:
        for trigger in _triggers(cursor, name):
            cursor.execute(f"DROP TRIGGER `{name}`.`{trigger[0]}`")
        cursor.execute(f"USE `{name}`")
        for statement in state.trigger_sql:
            cursor.execute(statement)


def _copy_stats(cursor: Any, name: str, made: dict[str, TableState]) -> None:
    """Give tables created from their text the snapshot's statistics: a migration's copying ``ALTER`` of a
    table holding rows left it counted (``alembic_version`` and ``tjobs_fence``: one row), a new one is empty.
    Written to InnoDB's statistics tables and reloaded (``FLUSH TABLES``), as MariaDB's manual allows."""
    stats = _stats(cursor, name)
    for table, wanted in made.items():
        if stats.get(table, ()) == wanted.stats:
            continue
        for index, stat, value in wanted.stats:
            if index == "":
                cursor.execute(
                    f"UPDATE mysql.innodb_table_stats SET `{stat}` = %s WHERE database_name = %s AND table_name = %s",
                    (value, name, table),
                )
            else:
                cursor.execute(
                    "UPDATE mysql.innodb_index_stats SET stat_value = %s WHERE database_name = %s AND table_name = %s "
                    "AND index_name = %s AND stat_name = %s",
                    (value, name, table, index, stat),
                )
        cursor.execute(f"FLUSH TABLES `{name}`.`{table}`")
    stats = _stats(cursor, name)
    differing = [table for table, wanted in made.items() if stats.get(table, ()) != wanted.stats]
    if differing:
        raise RuntimeError(f"{name}: the statistics of {differing} differ from the migrated template's")


def _rewritten(
    table: str, columns: tuple[str, ...], row: tuple[Any, ...], recorded: str, prefix: str
) -> tuple[Any, ...]:
    if table != LAYOUT_TABLE or dict(zip(columns, row, strict=True)).get("name") != "database_prefix":
        return row
    pairs = zip(columns, row, strict=True)
    return tuple(prefix if column == "value" and value == recorded else value for column, value in pairs)


@atexit.register
def _drop_sets() -> None:
    """Drop every set this process made (tests end before the process does)."""
    from testkit.databases import drop_databases

    for template in _TEMPLATES.values():
        for made in template.made:
            try:
                drop_databases(made)
            except Exception:  # the process is ending; a server gone takes its sets along
                continue
