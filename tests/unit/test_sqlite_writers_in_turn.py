"""A node's writers of one SQLite file take their turn in order of arrival instead of racing in SQLite's
busy handler: with hundreds of concurrent changes at load 7, one writer waited past the 10 s busy timeout
while later ones went first, and its request answered 503 "database is locked"
(test_changes_while_firing[sqlite] in a clean-clone run). Here the busy timeout is shrunk to 20 ms so
that the race shows at once: 40 writers, each holding the file's write lock for 10 ms."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from tjobs.settings import StorageSettings
from tjobs.stores import sql_layout
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

WRITERS = 40


async def test_concurrent_writers_of_one_sqlite_file_all_commit_past_a_short_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x4", pool_size=4)
    await migrate(settings)
    monkeypatch.setattr(sql_layout, "SQLITE_BUSY_TIMEOUT_MS", 20)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        url = store.layout.apps_database.engine_url
        async with store._write(url) as conn:
            await conn.execute(text("CREATE TABLE writers_in_turn (writer INTEGER)"))

        async def write(writer: int) -> None:
            async with store._write(url) as conn:
                await conn.execute(text("INSERT INTO writers_in_turn VALUES (:w)"), {"w": writer})
                await asyncio.sleep(0.01)  # the write lock held while the others arrive

        await asyncio.gather(*(write(i) for i in range(WRITERS)))
        async with store._connect(url) as conn:
            assert (await conn.execute(text("SELECT COUNT(*) FROM writers_in_turn"))).scalar() == WRITERS
    finally:
        await store.close()
