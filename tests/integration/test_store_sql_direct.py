"""The raw asyncmy path of the SQL store (``tjobs.stores.sql_direct``): same answers, same errors."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sharding import shard_of_task_id
from tests.contract.backends import drop_databases, make_task, mariadb_settings
from tjobs.errors import DuplicateKey, StorageUnavailable
from tjobs.migrate import migrate
from tjobs.settings import StorageSettings
from tjobs.stores.sql_direct import connect_kwargs
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.mariadb


@pytest.fixture
async def store(mysql_url: str) -> AsyncIterator[SQLAlchemyTaskStore]:
    settings = mariadb_settings(mysql_url)
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        yield store
    finally:
        await store.close()
        await drop_databases(settings)


async def test_single_row_calls_use_the_direct_pool_and_read_what_sqlalchemy_reads(
    store: SQLAlchemyTaskStore,
) -> None:
    assert store._direct, "a plain MariaDB URL gets a direct pool"
    task = make_task(key="direct-1")
    assert await store.insert_task(task) == task
    got = await store.get_task(task.id)
    assert got == task
    assert await store.find_task_by_key(task.app_id, "direct-1") == task
    listed = await store.list_tasks(task.app_id, shard_of_task_id(task.id), None, 10)  # through SQLAlchemy
    assert listed == [task]


async def test_a_taken_key_on_the_direct_path_is_a_duplicate_naming_the_holder(store: SQLAlchemyTaskStore) -> None:
    first = make_task(key="direct-2")
    await store.insert_task(first)
    with pytest.raises(DuplicateKey) as error:
        await store.insert_task(make_task(key="direct-2", name="twin"))
    assert error.value.existing_task_id == first.id


def test_urls_with_options_it_does_not_translate_keep_sqlalchemy() -> None:
    settings = StorageSettings(urls=["mysql+asyncmy://root@127.0.0.1:3306"])
    assert connect_kwargs("mysql+asyncmy://root@127.0.0.1:3306?charset=utf8mb4", settings) is not None
    assert connect_kwargs("mysql+asyncmy://root@127.0.0.1:3306?charset=utf8mb4&ssl_ca=/ca.pem", settings) is None


async def test_an_unreachable_server_is_storage_unavailable_on_the_direct_path() -> None:
    settings = StorageSettings(urls=["mysql+asyncmy://tjobs:s3cret@127.0.0.1:1"], topology="2x2x4",
                               connect_timeout_s=1)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        task = make_task(shard=3, key="k")
        for call in (store.insert_task(task), store.get_task(task.id), store.find_task_by_key(task.app_id, "k")):
            with pytest.raises(StorageUnavailable) as error:
                await call
            assert "127.0.0.1:1" in error.value.message and "s3cret" not in error.value.message
    finally:
        await store.close()
