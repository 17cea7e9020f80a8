"""The health ping of an SQLite file answers while the store's pool is busy: the ping took a pooled
connection, so writers holding every one of them (a 1,200-line import under load) made the file look
unreachable for 2 s and paused its shards, refusing creates (make check failed on it at load 9)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

from tjobs.settings import StorageSettings
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

POOL_SIZE = 2


async def test_a_sqlite_file_answers_its_ping_while_every_pooled_connection_is_taken(tmp_path: Path) -> None:
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x4", pool_size=POOL_SIZE)
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        [server] = store.configured_servers()
        engine = next(iter(store._engines.values()))
        async with AsyncExitStack() as held:
            for _ in range(2 * POOL_SIZE):  # the pool and its overflow
                await held.enter_async_context(engine.connect())
            await asyncio.wait_for(store.ping_server(server), 1.0)
    finally:
        await store.close()


async def test_a_missing_sqlite_file_does_not_answer_its_ping(tmp_path: Path) -> None:
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x4")
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        [server] = store.configured_servers()
        for path in (tmp_path / "data").parent.glob("data*"):
            remove(path)
        raised = None
        try:
            await asyncio.wait_for(store.ping_server(server), 5.0)
        except Exception as error:  # the store's own error for an unreadable file
            raised = error
        assert raised is not None and not isinstance(raised, TimeoutError)
    finally:
        await store.close()


def remove(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    else:
        path.unlink()
