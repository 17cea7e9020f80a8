"""The SQL hot change log disposes of its engine when opening it fails: an unmigrated SQLite file left
an aiosqlite connection to be closed by the garbage collector, whose ResourceWarning then failed
whichever test was running (make check: test_a_watcher_that_raised_is_handed_the_map_again[sqlite])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tjobs.settings import StorageSettings
from tjobs.stores.schema_revision import StorageNotMigrated
from tjobs.stores.sql import hot_changes
from tjobs.stores.sql.hot_changes import SqlHotChangeLog
from tjobs.stores.sql_layout import Layout, create_engine_for, sqlite_path


async def test_an_open_refused_for_an_unmigrated_schema_leaves_no_connection_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[AsyncEngine] = []

    def recording(url: str, settings: StorageSettings) -> AsyncEngine:
        engine = create_engine_for(url, settings)
        made.append(engine)
        return engine

    monkeypatch.setattr(hot_changes, "create_engine_for", recording)
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x4")
    make_directory(Path(sqlite_path(Layout(settings).apps_database.engine_url)).parent)  # an empty file, no schema
    log = SqlHotChangeLog(settings)
    with pytest.raises(StorageNotMigrated):
        await log.open()
    [engine] = made
    pool: Any = engine.sync_engine.pool
    assert pool.checkedin() + pool.checkedout() == 0


def make_directory(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
