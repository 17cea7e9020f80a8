"""Fencing by shard-map epoch on MariaDB (tjobs/stores/shard_fence.py): a logical database whose fence
admits only a later epoch than the writer's refuses the fire transaction and the registration, and
nothing is written; the other databases of the same server go on.

A move sets the fence of the copy it leaves to RETIRED and of the copy it fills to the new epoch; the
tests set fences directly, as the mover will.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sharding.shard_map import ShardMap
from tests.contract.backends import NOW_MS, drop_databases, intent_of, interval_planner, make_task, mariadb_settings
from tjobs.api.deps import error_headers
from tjobs.errors import StaleShardMap
from tjobs.settings import StorageSettings
from tjobs.stores.migrate import migrate
from tjobs.stores.shard_fence import RETIRED_EPOCH, read_fence, write_fence
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.mariadb


@pytest.fixture
async def store(mysql_url: str) -> AsyncIterator[SQLAlchemyTaskStore]:
    settings: StorageSettings = mariadb_settings(mysql_url)
    await migrate(settings)
    sql_store = SQLAlchemyTaskStore(settings)
    await sql_store.start()
    sql_store.use_shard_map(sql_store.seed_shard_map())  # epoch 1, as a node routes
    try:
        yield sql_store
    finally:
        await sql_store.close()
        await drop_databases(settings)


async def set_fence(store: SQLAlchemyTaskStore, database_index: int, epoch: int) -> None:
    home = store.layout.databases[database_index]
    async with store._write(home.engine_url) as conn:
        await write_fence(conn, home, epoch)


def shard_in(store: SQLAlchemyTaskStore, database_index: int) -> int:
    return store.topology.shards_of_database(database_index)[0]


async def test_a_retired_database_refuses_the_fire_and_the_other_databases_still_fire(
    store: SQLAlchemyTaskStore,
) -> None:
    moved_away = make_task(shard=shard_in(store, 1))
    staying = make_task(shard=shard_in(store, 2))
    for task in (moved_away, staying):
        await store.insert_task(task)
    await set_fence(store, 1, RETIRED_EPOCH)

    with pytest.raises(StaleShardMap, match="_01 refused a write under shard-map epoch 1"):
        await store.commit_fires([intent_of(moved_away)], NOW_MS, interval_planner)  # its server's only intent
    fired = await store.commit_fires([intent_of(staying)], NOW_MS, interval_planner)

    assert await store.get_flow(moved_away.id, NOW_MS) is None
    stored = await store.get_task(moved_away.id)
    assert stored is not None and stored.version == moved_away.version  # not advanced
    assert fired[0].error is None and len(fired[0].flows) == 1


async def test_a_registration_into_a_retired_database_is_refused_and_writes_nothing(
    store: SQLAlchemyTaskStore,
) -> None:
    await set_fence(store, 1, RETIRED_EPOCH)
    task = make_task(shard=shard_in(store, 1))

    with pytest.raises(StaleShardMap, match="retry after the map reloads"):
        await store.insert_task(task)
    with pytest.raises(StaleShardMap):
        await store.insert_tasks([make_task(shard=shard_in(store, 1)), make_task(shard=shard_in(store, 2))])

    assert await store.get_task(task.id) is None
    assert error_headers(StaleShardMap("moving")) == {"retry-after": "1"}  # the API's 503 says when


async def test_a_writer_under_an_older_epoch_is_refused_until_it_routes_by_the_newer_map(
    store: SQLAlchemyTaskStore,
) -> None:
    task = make_task(shard=shard_in(store, 3))
    await store.insert_task(task)
    await set_fence(store, 3, 3)  # the copy a move to epoch 3 filled

    with pytest.raises(StaleShardMap):
        await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)

    seeded = store.seed_shard_map()
    store.use_shard_map(ShardMap(3, seeded.servers, seeded.placement))
    fired = await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
    assert fired[0].error is None and len(fired[0].flows) == 1
    home = store.layout.databases[3]
    async with store._connect(home.engine_url) as conn:
        assert await read_fence(conn, home) == 3
