"""Keeping the shard map (:mod:`sharding.shard_map`): the embedded mode's storage of it and the
hand-over of newer maps (used by both coordinators), and what a node does with it at start
(:func:`establish_shard_map`) and what ``tjobs shards reseed`` does (:func:`reseed_shard_map`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from sharding.shard_map import ShardMap
from tjobs.cluster.base import Coordinator, ShardMapListener
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts import ShardMapMismatch, check_shard_map

logger = logging.getLogger(__name__)


class ShardMapHome(Protocol):
    """Where the embedded coordinator keeps the map: the store's record
    (:meth:`tjobs.stores.base.TaskStore.read_shard_map`) or :class:`MemoryShardMapHome`."""

    async def read_shard_map(self) -> ShardMap | None: ...

    async def swap_shard_map(self, new: ShardMap, expected_epoch: int | None) -> bool: ...


class MemoryShardMapHome:
    """The in-memory twin: the map lives as long as this object."""

    def __init__(self) -> None:
        self._map: ShardMap | None = None

    async def read_shard_map(self) -> ShardMap | None:
        return self._map

    async def swap_shard_map(self, new: ShardMap, expected_epoch: int | None) -> bool:
        if (self._map.epoch if self._map is not None else None) != expected_epoch:
            return False
        self._map = new
        return True


async def seed_in(home: ShardMapHome, seed: ShardMap) -> ShardMap:
    """:meth:`tjobs.cluster.base.Coordinator.seed_shard_map` over a home."""
    for _ in range(3):
        stored = await home.read_shard_map()
        if stored is not None:
            return stored
        if await home.swap_shard_map(seed, None):
            return seed
    raise RuntimeError("the shard map is being seeded concurrently and could not be read back")


async def replace_in(home: ShardMapHome, new: ShardMap, expected_epoch: int) -> bool:
    """:meth:`tjobs.cluster.base.Coordinator.replace_shard_map` over a home."""
    if new.epoch <= expected_epoch:
        return False
    return await home.swap_shard_map(new, expected_epoch)


class ShardMapWatch:
    """Hands the listener each map newer than the last it took; one that raised gets it again."""

    def __init__(self) -> None:
        self.listener: ShardMapListener | None = None
        self.handed_epoch = 0
        self._handing = asyncio.Lock()

    async def offer(self, shard_map: ShardMap | None) -> None:
        async with self._handing:
            await self._offer(shard_map)

    async def _offer(self, shard_map: ShardMap | None) -> None:
        if shard_map is None or self.listener is None or shard_map.epoch <= self.handed_epoch:
            return
        try:
            await self.listener(shard_map)
        except Exception as error:
            logger.warning(
                "the shard map listener did not take epoch %d (%s)",
                shard_map.epoch,
                error,
                extra={"action": "shard_map_listener_failed"},
            )
            return
        self.handed_epoch = shard_map.epoch
        logger.info("routing by shard map epoch %d", shard_map.epoch, extra={"action": "shard_map_loaded"})


async def establish_shard_map(coordinator: Coordinator, store: TaskStore) -> ShardMap:
    """At a node's start: seed the coordinator's map if none is stored (from the data's own record
    of it when there is one, else from the configured list), refuse a configured list that differs
    from the stored map's (:class:`tjobs.stores.contracts.ShardMapMismatch`, naming each
    difference), and route the store by the map."""
    stored = await coordinator.seed_shard_map(await store.read_shard_map() or store.seed_shard_map())
    check_shard_map(stored, store.configured_servers(), store.topology, "the stored shard map")
    store.use_shard_map(stored)
    return stored


async def reseed_shard_map(coordinator: Coordinator, store: TaskStore) -> ShardMap:
    """Make the stored map's server list the configured one (``tjobs shards reseed``): placements are
    kept, so a server that still holds databases cannot be dropped (:class:`ShardMapError`). Seeds the
    map if none is stored. Returns the stored map."""
    stored = await coordinator.seed_shard_map(await store.read_shard_map() or store.seed_shard_map())
    if not stored.differences(store.configured_servers()):
        return stored
    new = stored.with_servers(store.configured_servers())
    if not await coordinator.replace_shard_map(new, stored.epoch):
        raise ShardMapMismatch(f"the shard map changed from epoch {stored.epoch} while re-seeding; retry")
    recorded = await store.read_shard_map()  # the data's own copy (a cluster's map is etcd's)
    if recorded is None or recorded.epoch < new.epoch:
        await store.swap_shard_map(new, recorded.epoch if recorded is not None else None)
    logger.warning(
        "shard map re-seeded at epoch %d: servers %s",
        new.epoch,
        ", ".join(new.servers),
        extra={"action": "shard_map_reseeded"},
    )
    return new
