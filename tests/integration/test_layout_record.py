"""The data remembers its layout: a node or a migration with another topology, prefix or server count
refuses to run on it, with a message naming the setting (SQLite and MariaDB).

Before the layout record, a node restarted with ``storage.topology`` changed from 2x2x4 to 1x2x4 ran
silently and answered 404 for every task of the shards it no longer had.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete

from testkit import run_node
from testkit.databases import drop_databases
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.settings import StorageSettings, load_settings
from tjobs.stores.layout_record import _LAYOUT, ShardMapMismatch, StorageLayoutMismatch, StorageNotMigrated
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "sqlite":
        yield {"urls": [f"sqlite+aiosqlite:///{tmp_path / 'data'}"], "topology": "2x2x4"}
        return
    url = request.getfixturevalue("mysql_url")
    prefix = f"tjlay_{secrets.token_hex(3)}"
    yield {"urls": [url], "topology": "2x2x4", "database_prefix": prefix}
    drop_databases(StorageSettings(urls=[url], database_prefix=prefix, topology="2x2x4"))


def another_server_url(url: str) -> str:
    """A server the data was not laid out on: another directory, or the same MariaDB by another name."""
    if url.startswith("sqlite"):
        return url + "_other"
    return url.replace("127.0.0.1", "localhost")


def with_topology(storage: dict[str, Any], topology: str) -> dict[str, Any]:
    return {**storage, "topology": topology}


async def test_a_node_started_with_another_topology_on_existing_data_refuses_to_start(
    storage: dict[str, Any],
) -> None:
    await migrate(StorageSettings(**storage))
    async with run_node(load_settings(None, storage=storage, **FAST_SETTINGS)) as running:
        await running.create_app("layout")
        assert running.node.store.topology.shard_count == 16

    changed = load_settings(None, storage=with_topology(storage, "1x2x4"), **FAST_SETTINGS)
    with pytest.raises(StorageLayoutMismatch) as refused:
        async with run_node(changed):
            pass
    message = refused.value.message
    assert "storage.topology is '1x2x4'" in message and "'2x2x4'" in message

    async with run_node(load_settings(None, storage=storage, **FAST_SETTINGS)):  # the recorded layout still runs
        pass


async def test_migrate_with_another_topology_or_server_list_refuses_before_changing_anything(
    storage: dict[str, Any],
) -> None:
    await migrate(StorageSettings(**storage))
    with pytest.raises(StorageLayoutMismatch, match=re.escape("storage.topology is '1x2x4'")):
        await migrate(StorageSettings(**with_topology(storage, "1x2x4")))
    another_server = another_server_url(storage["urls"][0])
    with pytest.raises(ShardMapMismatch, match=r"storage.urls lists .*, which the shard map does not know"):
        await migrate(StorageSettings(**{**storage, "urls": [*storage["urls"], another_server]}))
    await migrate(StorageSettings(**storage))  # the recorded layout: idempotent


async def test_a_first_start_records_the_layout_and_an_unmigrated_database_is_named(
    storage: dict[str, Any],
) -> None:
    settings = StorageSettings(**storage)
    if storage["urls"][0].startswith("sqlite"):  # the directory exists, its databases do not
        os.makedirs(storage["urls"][0].split(":///", 1)[1])
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        with pytest.raises(StorageNotMigrated, match="run `tjobs migrate`"):
            await store.check_layout()
        await migrate(settings)
        async with store._write(store.layout.apps_database.engine_url) as conn:  # as before the record
            await conn.execute(delete(_LAYOUT), execution_options=store.layout.apps_options)
        await store.check_layout()  # first start: records
        other = SQLAlchemyTaskStore(StorageSettings(**with_topology(storage, "2x2x2")))
        await other.start()
        try:
            with pytest.raises(StorageLayoutMismatch, match=re.escape("storage.topology is '2x2x2'")):
                await other.check_layout()
        finally:
            await other.close()
    finally:
        await store.close()
