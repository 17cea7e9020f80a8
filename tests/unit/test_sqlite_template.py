"""The tests' SQLite migration by copy (:func:`testkit.sqlite_template.migrate_sqlite`) makes what
``tjobs migrate`` makes of a new directory: every file's schema, revision and rows (the layout record
included) equal, and the shard map the seed of the copy's own directory, which a store then starts on."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from sharding.shard_map import ShardMap
from testkit import sqlite_template
from testkit.sqlite_template import migrate_sqlite
from tjobs.settings import StorageSettings
from tjobs.stores.migrate import migrate
from tjobs.stores.schema import SHARD_MAP_TABLE
from tjobs.stores.shard_fence import read_recorded_map
from tjobs.stores.sql_layout import Layout, configured_servers, create_engine_for, sqlite_path
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

TOPOLOGY = "2x2x4"


def settings(directory: Path, prefix: str = "tjobs") -> StorageSettings:
    return StorageSettings(urls=[f"sqlite+aiosqlite:///{directory}"], topology=TOPOLOGY, database_prefix=prefix)


def directory_name(storage: StorageSettings) -> str:
    """The server's name the shard map records for a SQLite directory: the directory."""
    [name] = configured_servers(storage.urls)
    return name


def contents(path: str) -> list[object]:
    """The schema and every row of every table but the shard map."""
    with closing(sqlite3.connect(path)) as conn:
        schema = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        tables = [name for kind, name, *_ in schema if kind == "table" and name != SHARD_MAP_TABLE]
        rows = [(t, sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr)) for t in tables]
        return [schema, rows]


async def recorded_map(storage: StorageSettings) -> ShardMap | None:
    layout = Layout(storage)
    engine = create_engine_for(layout.apps_database.engine_url, storage)
    try:
        async with engine.connect() as conn:
            return await read_recorded_map(conn, layout)
    finally:
        await engine.dispose()


async def test_a_copy_holds_what_migrating_the_directory_makes_with_its_own_seed_map(tmp_path: Path) -> None:
    migrated, copied, again = settings(tmp_path / "m" / "data"), settings(tmp_path / "c"), settings(tmp_path / "a")
    await migrate(migrated)
    await migrate_sqlite(copied)
    await migrate_sqlite(again)  # the second copy of the same template
    assert len(sqlite_template._TEMPLATES) >= 1
    for storage in (copied, again):
        files = [sqlite_path(home.engine_url) for home in Layout(storage).databases]
        reference = [sqlite_path(home.engine_url) for home in Layout(migrated).databases]
        assert len(files) == 4
        for copy, original in zip(files, reference, strict=True):
            assert contents(copy) == contents(original)
        own = await recorded_map(storage)
        assert own is not None and own.servers == (directory_name(storage),)
        made = await recorded_map(migrated)
        assert made is not None
        assert (own.epoch, own.placement) == (made.epoch, tuple(own.servers[0] for _ in made.placement))
        assert own == ShardMap.seed([own.servers[0]], Layout(storage).topology)
        store = SQLAlchemyTaskStore(storage)  # checks the recorded map against the configured directory
        await store.start()
        await store.close()


async def test_a_directory_with_data_or_another_layout_is_migrated(tmp_path: Path) -> None:
    storage = settings(tmp_path / "d")
    await migrate_sqlite(storage)
    first = sqlite_path(Layout(storage).apps_database.engine_url)
    with closing(sqlite3.connect(first)) as conn:
        conn.execute("CREATE TABLE kept (x INTEGER)")
        conn.commit()
    await migrate_sqlite(storage)  # exists: migrated in place (nothing to do), not replaced
    with closing(sqlite3.connect(first)) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)
    other = settings(tmp_path / "p", prefix="other")
    await migrate_sqlite(other)
    assert Path(sqlite_path(Layout(other).apps_database.engine_url)).name.startswith("other_")
    assert (await recorded_map(other)) == ShardMap.seed([directory_name(other)], Layout(other).topology)
