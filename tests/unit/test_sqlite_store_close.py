"""A SQLite store that closes while a write is still running (a create its caller stopped waiting for at
``storage.create_timeout_s``: the write is not cancelled, it ends on its own) closes that write's connection
too. Disposing of an engine closes only the connections in its pool: one checked out then went back, when
its write ended, to the pool the engine had dropped, and nothing closed it; the garbage collector found it
later, and aiosqlite's ``ResourceWarning`` ("deleted before being closed", an error under the suite's
``filterwarnings``) failed whichever test it was then running, usually at the setup of a SQLite test."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import warnings
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from testkit.sqlite_template import migrate_sqlite
from tests.contract.backends import TOPOLOGY, make_task
from tjobs.errors import StorageOutcomeUnknown
from tjobs.settings import StorageSettings
from tjobs.stores.sql_layout import sqlite_path
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

CREATE_TIMEOUT_S = 0.3  # the caller gives up while the write waits for the lock
LOCK_HELD_S = 0.5  # more, by another connection, once the store is closing: the write waits in the busy handler


async def test_a_store_closed_while_a_write_runs_past_its_caller_leaves_no_connection_to_the_garbage_collector(
    tmp_path: Path,
) -> None:
    settings = StorageSettings(
        urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology=TOPOLOGY, create_timeout_s=CREATE_TIMEOUT_S
    )
    await migrate_sqlite(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    task = make_task(shard=0)
    url = store.layout.shards[0].database.engine_url
    pool: Any = store._engines[url].sync_engine.pool  # the pool the write's connection comes from
    with closing(sqlite3.connect(sqlite_path(url), isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")  # the file's write lock: the store's write waits for it
        with pytest.raises(StorageOutcomeUnknown):
            await store.insert_task(task)  # the caller gives up; its write runs on
        assert pool.checkedout() == 1
        writes = set(store._groups[url]._flushes)  # the group commit's write, still waiting for the lock
        asyncio.get_running_loop().call_later(LOCK_HELD_S, holder.execute, "ROLLBACK")
        await store.close()
        _, running = await asyncio.wait(writes, timeout=15)  # it ends once the lock is given up
        assert not running
    with warnings.catch_warnings(record=True) as caught:  # the store, its engines and pools collected now
        warnings.simplefilter("always")
        del store, pool
        gc.collect()
    assert [str(warning.message) for warning in caught if warning.category is ResourceWarning] == []
