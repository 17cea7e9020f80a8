"""The shard map on the coordinator seam (:class:`tjobs.cluster.base.Coordinator`): seeded once, replaced
only by compare-and-set on its epoch, read before start, and handed to the watcher when it grows; on
the in-memory coordinator, the embedded one keeping the map in its store's record (SQLite), and etcd.

Waits are for a condition, bounded generously: a newer map is handed within a sync interval (50 ms here)
or a map poll (100 ms here).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aetcd
import pytest
from sqlalchemy import delete

from sharding import Topology
from sharding.shard_map import ShardMap
from tjobs.clock import SystemClock
from tjobs.cluster.base import Coordinator
from tjobs.cluster.etcd import EtcdCoordinator, _host_port
from tjobs.cluster.local import LocalCoordinator
from tjobs.cluster.shard_maps import MemoryShardMapHome, ShardMapHome
from tjobs.settings import ClusterSettings, StorageSettings
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.migrate import migrate
from tjobs.stores.shard_fence import _SHARD_MAP
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

TOPOLOGY = Topology(2, 2, 4)
SHARDS = TOPOLOGY.shard_count
SEED = ShardMap.seed(["db1:3306", "db2:3306"], TOPOLOGY)
SETTLE_TIMEOUT_S = 8.0

Cluster = Callable[[], Coordinator]  # one more coordinator of the same cluster (sharing one map)


def _local(home: ShardMapHome) -> Cluster:
    return lambda: LocalCoordinator(SHARDS, "local", sync_interval_ms=50, map_home=home, map_poll_interval_ms=100)


@pytest.fixture(params=["memory", "sqlite", pytest.param("etcd", marks=pytest.mark.etcd)])
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Cluster]:
    made: list[Coordinator] = []

    def track(factory: Cluster) -> Cluster:
        def new() -> Coordinator:
            made.append(factory())
            return made[-1]

        return new

    if request.param == "memory":
        yield track(_local(MemoryShardMapHome()))
    elif request.param == "sqlite":
        settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology=str(TOPOLOGY))
        await migrate(settings)
        store = SQLAlchemyTaskStore(settings)
        await store.start()
        try:
            async with store._write(store.layout.apps_database.engine_url) as conn:  # migrate recorded one
                await conn.execute(delete(_SHARD_MAP))
            yield track(_local(store))
        finally:
            await store.close()
    else:
        etcd_url: str = request.getfixturevalue("etcd_url")
        name = f"shardmap-{secrets.token_hex(4)}"
        settings_ = ClusterSettings(etcd_endpoints=[etcd_url], name=name, lease_ttl_s=2, sync_interval_ms=50)
        yield track(
            lambda: EtcdCoordinator(
                settings_,
                node_id=f"n{len(made)}",
                address="http://n",
                shard_count=SHARDS,
                cycle_s=300,
                store=MemoryTaskStore(TOPOLOGY),
                clock=SystemClock(),
            )
        )
        host, port = _host_port(etcd_url)
        async with aetcd.Client(host=host, port=port) as client:
            await client.delete_prefix(f"/tjobs/{name}/".encode())
    for coordinator in made:
        await coordinator.stop()


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {SETTLE_TIMEOUT_S} s: {what}", pytrace=False)
        await asyncio.sleep(0.02)


async def test_the_first_seed_is_stored_and_a_later_seed_gets_the_stored_map(cluster: Cluster) -> None:
    first, second = cluster(), cluster()
    assert await first.read_shard_map() is None  # before start: the map is readable

    assert await first.seed_shard_map(SEED) == SEED
    other_seed = ShardMap.seed(["db3:3306"], TOPOLOGY)
    assert await second.seed_shard_map(other_seed) == SEED  # a configured list only seeds
    assert await second.read_shard_map() == SEED


async def test_two_nodes_seeding_at_once_get_one_map(cluster: Cluster) -> None:
    seeds = [ShardMap.seed([f"db{n}:3306"], TOPOLOGY) for n in range(4)]

    stored = await asyncio.gather(*(cluster().seed_shard_map(seed) for seed in seeds))

    assert len(set(stored)) == 1 and stored[0] in seeds


async def test_a_replace_is_a_compare_and_set_on_the_epoch(cluster: Cluster) -> None:
    first, second = cluster(), cluster()
    await first.seed_shard_map(SEED)
    moved = SEED.moved(3, "db2:3306")

    assert await first.replace_shard_map(moved, SEED.epoch)
    assert not await second.replace_shard_map(SEED.moved(2, "db1:3306"), SEED.epoch)  # lost the race
    assert not await second.replace_shard_map(SEED, moved.epoch)  # never back to an older epoch
    assert await second.read_shard_map() == moved


async def test_a_started_node_is_handed_each_newer_map_once(cluster: Cluster) -> None:
    mover, node = cluster(), cluster()
    await mover.seed_shard_map(SEED)
    handed: list[ShardMap] = []

    async def take(shard_map: ShardMap) -> None:
        handed.append(shard_map)

    node.watch_shard_map(take)
    await node.start(_ignore_ownership)
    await wait_for(lambda: bool(handed), "the stored map handed at start")
    moved = SEED.moved(3, "db2:3306")
    assert await mover.replace_shard_map(moved, SEED.epoch)
    await wait_for(lambda: handed[-1] == moved, "the moved map handed")
    await asyncio.sleep(0.3)  # a few more syncs and polls: nothing is handed twice

    assert handed == [SEED, moved]


async def test_a_watcher_that_raised_is_handed_the_map_again(cluster: Cluster) -> None:
    owner = cluster()
    await owner.seed_shard_map(SEED)
    calls: list[ShardMap] = []

    async def fail_once(shard_map: ShardMap) -> None:
        calls.append(shard_map)
        if len(calls) == 1:
            raise RuntimeError("an engine for the new server did not open")

    owner.watch_shard_map(fail_once)
    await owner.start(_ignore_ownership)
    await wait_for(lambda: len(calls) >= 2, "the map handed again")

    assert calls[:2] == [SEED, SEED]


async def _ignore_ownership(owned: frozenset[int]) -> None:
    return None
