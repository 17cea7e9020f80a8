"""``tjobs migrate`` on SQLite: databases created by the run are migrated once and copied, and the copies
are the schema a migration of each would have made; a database that exists is migrated, never replaced."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tjobs.settings import StorageSettings
from tjobs.stores import migrate as migrate_module
from tjobs.stores.migrate import migrate
from tjobs.stores.sql_layout import Layout, sqlite_path

TOPOLOGY = "1x4x3"


def settings(root: Path) -> StorageSettings:
    return StorageSettings(urls=[f"sqlite+aiosqlite:///{root / 'data'}"], topology=TOPOLOGY)


def schema(path: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        return rows + conn.execute("SELECT version_num FROM alembic_version").fetchall()


def delete(path: str) -> None:
    Path(path).unlink()


def database_files(storage: StorageSettings) -> list[str]:
    return [sqlite_path(home.engine_url) for home in Layout(storage).databases]


async def test_copied_databases_hold_what_migrating_each_would_have_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copied = settings(tmp_path / "copied")
    await migrate(copied)
    with monkeypatch.context() as patch:
        patch.setattr(migrate_module, "_sqlite_copies", lambda _layout: [])
        migrated = settings(tmp_path / "migrated")
        await migrate(migrated)
    assert len(database_files(copied)) == 4
    for copy, reference in zip(database_files(copied), database_files(migrated), strict=True):
        assert schema(copy) == schema(reference)
        assert any(name == "tasks_02" for _, name, *_ in schema(copy))


async def test_a_database_that_exists_is_migrated_not_replaced(tmp_path: Path) -> None:
    storage = settings(tmp_path)
    await migrate(storage)
    files = database_files(storage)
    with closing(sqlite3.connect(files[2])) as conn:
        conn.execute("CREATE TABLE kept (x INTEGER)")
        conn.commit()
    delete(files[3])
    await migrate(storage)
    assert any(name == "kept" for _, name, *_ in schema(files[2]))
    assert schema(files[3]) == schema(files[1])
