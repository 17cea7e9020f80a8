"""The tests' MariaDB sets (:func:`testkit.mariadb_template.fresh_mariadb`) hold what ``tjobs migrate`` makes
of new databases: each database's tables with their columns, indexes, options, CHECK constraints and
``AUTO_INCREMENT``, triggers, persistent statistics, schema revision and rows (the layout record with the
set's own prefix, the shard map, the fences) equal to a fresh migration's, whether the set was just
migrated, created from the snapshot beside one in use, or reused after a test wrote rows, advanced
``AUTO_INCREMENT``, moved a fence, ran ``ANALYZE``, dropped an index and added a table and a trigger."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from testkit import mariadb_template
from testkit.databases import connect_mysql, drop_databases
from testkit.mariadb_template import fresh_mariadb, layout_key, release_mariadb
from tests.contract.backends import make_task, mariadb_settings
from tjobs.settings import StorageSettings
from tjobs.stores import migrate as migrate_module
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

SCHEMA_QUERIES = {  # each: (query, the column naming the database); information_schema's names differ by table
    "schemata": (
        "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA",
        "SCHEMA_NAME",
    ),
    "tables": (
        "SELECT TABLE_NAME, TABLE_TYPE, ENGINE, ROW_FORMAT, AUTO_INCREMENT, TABLE_COLLATION, CREATE_OPTIONS "
        "FROM information_schema.TABLES",
        "TABLE_SCHEMA",
    ),
    "columns": (
        "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_DEFAULT, IS_NULLABLE, COLUMN_TYPE, "
        "CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_KEY, EXTRA, IS_GENERATED, GENERATION_EXPRESSION "
        "FROM information_schema.COLUMNS",
        "TABLE_SCHEMA",
    ),
    "indexes": (
        "SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME, SUB_PART, INDEX_TYPE, COLLATION "
        "FROM information_schema.STATISTICS",
        "TABLE_SCHEMA",
    ),
    "checks": (
        "SELECT TABLE_NAME, CONSTRAINT_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS",
        "CONSTRAINT_SCHEMA",
    ),
    "constraints": (
        "SELECT TABLE_NAME, CONSTRAINT_NAME, CONSTRAINT_TYPE FROM information_schema.TABLE_CONSTRAINTS",
        "CONSTRAINT_SCHEMA",
    ),
    "triggers": (
        "SELECT TRIGGER_NAME, EVENT_MANIPULATION, EVENT_OBJECT_TABLE, ACTION_TIMING, ACTION_STATEMENT "
        "FROM information_schema.TRIGGERS",
        "TRIGGER_SCHEMA",
    ),
    "routines": ("SELECT ROUTINE_NAME, ROUTINE_TYPE FROM information_schema.ROUTINES", "ROUTINE_SCHEMA"),
    "table stats": (
        "SELECT table_name, n_rows, clustered_index_size, sum_of_other_index_sizes FROM mysql.innodb_table_stats",
        "database_name",
    ),
    "index stats": (
        "SELECT table_name, index_name, stat_name, stat_value FROM mysql.innodb_index_stats",
        "database_name",
    ),
}


def connect(url: str) -> Any:
    return connect_mysql(url, autocommit=True)


def contents(settings: StorageSettings) -> list[dict[str, Any]]:
    """Every logical database's schema, statistics and rows, its name and the prefix written as ``<p>``."""
    prefix = settings.database_prefix
    found = []
    with connect(settings.urls[0]) as conn, conn.cursor() as cursor:
        cursor.execute("SHOW DATABASES LIKE %s", (f"{prefix}\\_%",))
        names = sorted(name for (name,) in cursor.fetchall())
        assert len(names) == 4, names
        for name in names:
            facts: dict[str, Any] = {"name": name.replace(prefix, "<p>")}
            for kind, (query, schema_column) in SCHEMA_QUERIES.items():
                cursor.execute(f"{query} WHERE {schema_column} = %s", (name,))
                # a copying ALTER of a migration leaves statistics rows of its temporary table (#sql-alter-...)
                facts[kind] = sorted((row for row in cursor.fetchall() if not str(row[0]).startswith("#")), key=repr)
            cursor.execute(f"SHOW FULL TABLES FROM `{name}`")
            tables = sorted(cursor.fetchall())
            facts["create"] = {}
            facts["rows"] = {}
            for table, _ in tables:
                cursor.execute(f"SHOW CREATE TABLE `{name}`.`{table}`")
                facts["create"][table] = cursor.fetchone()[1]
                cursor.execute(f"SELECT * FROM `{name}`.`{table}`")
                rows = [tuple(str(v).replace(prefix, "<p>") for v in row) for row in cursor.fetchall()]
                facts["rows"][table] = sorted(rows)
            found.append(facts)
    return found


def differences(found: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What tells two ``contents`` apart, compactly: (database, kind[, table], only in found, only in wanted);
    a failing comparison names these instead of printing every table's definition."""
    if len(found) != len(wanted):
        return [("databases", [f["name"] for f in found], [w["name"] for w in wanted])]
    differing: list[tuple[Any, ...]] = []
    for have, want in zip(found, wanted, strict=True):
        for kind in sorted(set(have) | set(want)):
            a, b = have.get(kind), want.get(kind)
            if a == b:
                continue
            if isinstance(a, dict) and isinstance(b, dict):
                for table in sorted(set(a) | set(b)):
                    if a.get(table) != b.get(table):
                        differing.append((want["name"], kind, table, a.get(table), b.get(table)))
            elif isinstance(a, list) and isinstance(b, list):
                differing.append((want["name"], kind, [r for r in a if r not in b], [r for r in b if r not in a]))
            else:
                differing.append((want["name"], kind, a, b))
    return differing


def execute(settings: StorageSettings, *statements: str) -> None:
    with connect(settings.urls[0]) as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")  # a row of defaults in any table
        for statement in statements:
            cursor.execute(statement.replace("<p>", settings.database_prefix))


@pytest.fixture
async def migrated(mysql_url: str) -> AsyncIterator[StorageSettings]:
    settings = mariadb_settings(mysql_url)
    await migrate(settings)
    try:
        yield settings
    finally:
        drop_databases(settings)


async def starts(settings: StorageSettings) -> None:
    store = SQLAlchemyTaskStore(settings)  # checks the revision, the layout record and the shard map
    await store.start()
    try:
        task = make_task()
        assert await store.insert_task(task) == task
    finally:
        await store.close()


@pytest.mark.mariadb
async def test_every_set_holds_what_a_fresh_migration_makes(migrated: StorageSettings, mysql_url: str) -> None:
    reference = contents(migrated)
    rows = {table: rows for table, rows in reference[0]["rows"].items() if rows}
    assert set(rows) == {"alembic_version", "tjobs_fence", "tjobs_layout", "tjobs_shard_map"}, rows
    assert ("database_prefix", "<p>") in rows["tjobs_layout"]
    asked = mariadb_settings(mysql_url)

    first = await fresh_mariadb(asked)
    second = await fresh_mariadb(asked)  # the first is in use: another set, made from the snapshot
    assert len({first.database_prefix, second.database_prefix, asked.database_prefix}) == 3
    for leased in (first, second):
        assert leased.model_copy(update={"database_prefix": asked.database_prefix}) == asked
        assert not differences(contents(leased), reference)
        await starts(leased)
    execute(
        second,
        "INSERT INTO `<p>_00`.audit_log () VALUES (), ()",  # AUTO_INCREMENT advanced
        "INSERT INTO `<p>_00`.hot_changes () VALUES ()",
        "UPDATE `<p>_01`.tjobs_fence SET epoch = 7",
        "DELETE FROM `<p>_02`.alembic_version",
        "INSERT INTO `<p>_00`.tasks_00 () VALUES ()",
        "ANALYZE TABLE `<p>_00`.tasks_00",  # statistics of a row the restore deletes
        "ALTER TABLE `<p>_03`.tasks_01 DROP INDEX tasks_01_app_name",
        "CREATE TABLE `<p>_01`.extra (x INT)",
        "CREATE VIEW `<p>_02`.a_view AS SELECT 1 AS one",
        "CREATE TRIGGER `<p>_00`.extra_trigger BEFORE INSERT ON `<p>_00`.apps FOR EACH ROW SET @seen = 1",
    )
    changed = contents(second)
    assert changed != reference  # the comparison sees each of these changes
    assert differences(changed, reference)
    for index, kind in [(0, "tables"), (1, "rows"), (2, "rows"), (0, "table stats"), (3, "indexes"), (0, "triggers")]:
        assert changed[index][kind] != reference[index][kind], (index, kind)
    release_mariadb(first)
    release_mariadb(second)

    again = await fresh_mariadb(asked)  # a reused set, put back
    assert again.database_prefix in {first.database_prefix, second.database_prefix}
    other = await fresh_mariadb(asked)
    assert {again.database_prefix, other.database_prefix} == {first.database_prefix, second.database_prefix}
    for leased in (again, other):
        assert not differences(contents(leased), reference)
        await starts(leased)
    release_mariadb(again)
    release_mariadb(other)


@pytest.mark.mariadb
async def test_a_table_that_held_pages_of_rows_is_fresh_when_the_server_recounts_it(
    migrated: StorageSettings, mysql_url: str
) -> None:
    """The server recounts a table's statistics by itself, when it likes (``innodb_stats_auto_recalc``: at
    most every 10 s a table, after a tenth of its rows changed). Rows deleted by the restore stay on their
    pages, delete-marked, until purge frees them: a recount in between counted the pages (CI at 099c824:
    ``audit_log`` 25 pages, 24 leaves, against a fresh migration's 1). Here purge is held by a reader's
    snapshot and the recount is asked for (``ANALYZE``), the moment CI met by chance."""
    reference = contents(migrated)
    asked = mariadb_settings(mysql_url)
    used = await fresh_mariadb(asked)
    execute(used, "INSERT INTO `<p>_00`.audit_log (before_json, after_json) SELECT '', '' FROM `<p>_00`.seq_1_to_5000")
    release_mariadb(used)
    with connect(asked.urls[0]) as reader, reader.cursor() as cursor:
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")  # purge keeps what this reader may see
        cursor.execute("SELECT 1 FROM mysql.user LIMIT 1")
        again = await fresh_mariadb(asked)
        assert again.database_prefix == used.database_prefix  # the set just given back is reused first
        execute(again, "ANALYZE TABLE `<p>_00`.audit_log")
        try:
            assert not differences(contents(again), reference)
        finally:
            cursor.execute("ROLLBACK")
            release_mariadb(again)


def test_the_layout_key_follows_the_migration_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copied = tmp_path / "migrations"
    shutil.copytree(migrate_module.MIGRATIONS_DIR, copied, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(migrate_module, "MIGRATIONS_DIR", copied)
    storage = mariadb_settings("mysql+asyncmy://root@127.0.0.1:3306")
    key = layout_key(storage)
    assert layout_key(storage.model_copy(update={"database_prefix": "another", "pool_size": 1})) == key
    assert layout_key(storage.model_copy(update={"topology": "1x2x4"})) != key
    newest = sorted((copied / "versions").glob("*.py"))[-1]
    newest.write_text(newest.read_text() + "\n# changed\n")
    assert layout_key(storage) != key
    assert mariadb_template.reusable(storage)
    assert not mariadb_template.reusable(StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path}"]))
