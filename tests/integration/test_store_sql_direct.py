"""The raw asyncmy path of the SQL store (``tjobs.stores.sql_direct``): same answers, same errors;
group commit of concurrent single inserts, and a batch in one transaction per server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from sharding import shard_of_task_id
from testkit.mariadb_template import fresh_mariadb, release_mariadb
from tests.contract.backends import make_task, mariadb_settings
from tjobs.errors import Conflict, DuplicateKey, StorageUnavailable
from tjobs.model import Task
from tjobs.settings import StorageSettings
from tjobs.specs import CallbackSpec
from tjobs.stores import sql_direct
from tjobs.stores.sql_direct import DirectPool, WriteAttempt, connect_kwargs
from tjobs.stores.sql_layout import ShardTables
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.mariadb


@pytest.fixture
async def store(mysql_url: str) -> AsyncIterator[SQLAlchemyTaskStore]:
    settings = await fresh_mariadb(mariadb_settings(mysql_url))  # as migrated, in ~0.1 s
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        yield store
    finally:
        await store.close()
        release_mariadb(settings)


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
    settings = StorageSettings(urls=["mysql+asyncmy://tjobs:s3cret@127.0.0.1:1"], topology="2x2x4", connect_timeout_s=1)
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


def record_groups(store: SQLAlchemyTaskStore) -> list[int]:
    """Wrap the group commit's writer: the size of each group of single inserts it writes."""
    (group,) = store._groups.values()
    sizes: list[int] = []
    original = group._write

    async def write(tasks: list[Task], attempt: WriteAttempt) -> list[Any]:
        sizes.append(len(tasks))
        return await original(tasks, attempt)

    group._write = write
    return sizes


def record_transactions(store: SQLAlchemyTaskStore) -> list[int]:
    """Wrap the direct pool's ``insert_new``: the rows of each transaction it runs, in order."""
    (pool,) = store._direct.values()
    sizes: list[int] = []
    original = pool.insert_new

    async def insert_new(
        groups: Sequence[tuple[ShardTables, Sequence[Task]]],
        fence_epoch: int | None = None,
        attempt: WriteAttempt | None = None,
    ) -> None:
        sizes.append(sum(len(tasks) for _, tasks in groups))
        await original(groups, fence_epoch, attempt)

    pool.insert_new = insert_new  # type: ignore[method-assign]
    return sizes


async def test_concurrent_single_inserts_share_transactions_and_a_bad_row_fails_only_its_own_caller(
    store: SQLAlchemyTaskStore,
) -> None:
    # Given 60 concurrent single inserts, one of them with a name too long for its column
    sizes = record_groups(store)
    tasks = [make_task(name=f"n{i}") for i in range(60)]
    tasks[37] = replace(tasks[37], name="x" * 300)

    # When they are inserted at once
    results = await asyncio.gather(*(store.insert_task(t) for t in tasks), return_exceptions=True)

    # Then they were grouped, only the bad one failed, and every other one is stored
    assert max(sizes) > 1, sizes
    assert isinstance(results[37], Exception) and not isinstance(results[37], Conflict)
    for index, (task, result) in enumerate(zip(tasks, results, strict=True)):
        if index != 37:
            assert result == task
            assert await store.get_task(task.id) == task
    assert await store.get_task(tasks[37].id) is None


async def test_twenty_concurrent_inserts_of_one_key_in_groups_leave_one_row(store: SQLAlchemyTaskStore) -> None:
    sizes = record_groups(store)
    candidates = [make_task(key="grouped-key", name=f"n{i}") for i in range(20)]
    results = await asyncio.gather(*(store.insert_task(t) for t in candidates), return_exceptions=True)
    winners = [r for r in results if isinstance(r, Task)]
    assert len(winners) == 1 and max(sizes) > 1
    duplicates = [r for r in results if isinstance(r, DuplicateKey)]
    assert len(duplicates) == 19 and {d.existing_task_id for d in duplicates} == {winners[0].id}
    assert await store.find_task_by_key("app-a", "grouped-key") == winners[0]


async def test_a_taken_id_in_a_group_is_a_conflict_for_that_caller_only(store: SQLAlchemyTaskStore) -> None:
    holder = make_task()
    await store.insert_task(holder)
    sizes = record_groups(store)
    tasks = [make_task(name=f"n{i}") for i in range(30)]
    tasks[11] = replace(tasks[11], name="same id")
    tasks[11].id = holder.id
    results = await asyncio.gather(*(store.insert_task(t) for t in tasks), return_exceptions=True)
    assert max(sizes) > 1
    assert isinstance(results[11], Conflict) and not isinstance(results[11], DuplicateKey)
    assert [r for i, r in enumerate(results) if i != 11] == [t for i, t in enumerate(tasks) if i != 11]
    assert await store.get_task(holder.id) == holder


async def test_a_batch_is_one_transaction_per_server_and_answers_taken_keys_with_their_holder(
    store: SQLAlchemyTaskStore,
) -> None:
    existing = make_task(key="already-there")
    await store.insert_task(existing)
    sizes = record_transactions(store)
    batch = [make_task(name=f"b{i}") for i in range(300)]
    batch[5] = make_task(key="already-there", name="again")
    batch[9] = make_task(key="twice-in-batch", name="first")
    batch[10] = make_task(key="twice-in-batch", name="second")

    results = await store.insert_tasks(batch)

    assert sizes == [298]  # one transaction; the taken key and the in-batch repeat are not written
    assert results[5] == existing.id
    assert results[9] == batch[9] and results[10] == batch[9].id
    shards = {shard_of_task_id(t.id) for t in batch}
    assert len(shards) == len(store.layout.shards)  # spread over every shard and logical database
    for task in batch:
        if task not in (batch[5], batch[10]):
            assert await store.get_task(task.id) == task


async def test_a_batch_larger_than_a_round_trip_is_still_one_transaction(
    store: SQLAlchemyTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_direct, "ROUND_TRIP_BYTES", 3000)  # a few rows per round trip
    sizes = record_transactions(store)
    batch = [make_task(name=f"b{i}") for i in range(100)]
    assert await store.insert_tasks(batch) == batch
    assert sizes == [100]
    for task in batch:
        assert await store.get_task(task.id) == task


async def test_a_key_taken_after_the_batch_looked_is_settled_item_by_item(store: SQLAlchemyTaskStore) -> None:
    # Given a key that a concurrent writer takes between the batch's look-up and its insert
    holder = make_task(key="raced")
    await store.insert_task(holder)
    (pool,) = store._direct.values()

    async def nothing_taken(groups: Any) -> dict[tuple[str, str], int]:
        return {}

    pool.taken_keys = nothing_taken  # type: ignore[method-assign]
    batch = [make_task(name=f"b{i}") for i in range(20)]
    batch[7] = make_task(key="raced", name="late")

    # When the batch is inserted, its one transaction is refused
    results = await store.insert_tasks(batch)

    # Then each item was settled on its own: the late one gets the holder's id, the rest are stored
    assert results[7] == holder.id
    for index, task in enumerate(batch):
        if index != 7:
            assert results[index] == task and await store.get_task(task.id) == task


async def test_a_pool_closed_by_the_store_is_reopened_on_next_start(mysql_url: str) -> None:
    settings = await fresh_mariadb(mariadb_settings(mysql_url))  # as migrated, in ~0.1 s
    store = SQLAlchemyTaskStore(settings)
    try:
        for _ in range(2):
            await store.start()
            assert isinstance(next(iter(store._direct.values())), DirectPool)
            task = make_task()
            assert await store.insert_task(task) == task
            await store.close()
    finally:
        await store.close()
        release_mariadb(settings)


async def test_a_server_without_a_direct_pool_creates_through_the_engine_with_the_same_statements(
    store: SQLAlchemyTaskStore,
) -> None:
    # Given a server whose URL gets no direct pool (options sql_direct does not translate): the
    # engine runs sql_direct's INSERT text, one row per execution
    pools = dict(store._direct)
    store._direct.clear()
    try:
        named = CallbackSpec(("https://receiver.example/hook",), "POST", {}, targets=("orders",))
        single = replace(make_task(key="engine-1"), callback=named)
        assert await store.insert_task(single) == single  # a group commit's flush
        batch = [
            make_task(key="engine-2"),
            make_task(key="engine-1", name="twin"),
            replace(make_task(), callback=named),
        ]
        assert await store.insert_tasks(batch) == [batch[0], single.id, batch[2]]
        with pytest.raises(DuplicateKey) as error:
            await store.insert_task(make_task(key="engine-2", name="again"))
        assert error.value.existing_task_id == batch[0].id
        assert await store.get_task(batch[2].id) == batch[2]
        assert await store.count_target_references(single.app_id, "orders") == 2
    finally:
        store._direct.update(pools)  # closed with the store
