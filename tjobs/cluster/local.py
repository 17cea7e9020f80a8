"""The embedded coordinator: one process owns every job from start to stop (the in-memory twin of the
etcd coordinator, held to the same contract by ``tests/contract/test_coordinator_contract.py``).

The shard map lives in its home: the store's record in the embedded mode (so ``tjobs shards`` run
from another process changes it), in memory by default. The home is read every
``map_poll_interval_ms`` while started, and a newer map is handed to the watcher."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from sharding.shard_map import ShardMap
from tjobs.cancellation import stop_task
from tjobs.cluster.base import Coordinator, OwnershipListener, RenewNow, ShardMapListener
from tjobs.cluster.db_health import DatabaseHealth
from tjobs.cluster.local_pools import LocalPoolRegistry
from tjobs.cluster.shard_maps import MemoryShardMapHome, ShardMapHome, ShardMapWatch, replace_in, seed_in
from tjobs.pools.model import Executor, ExecutorLease

logger = logging.getLogger(__name__)

SYNC_INTERVAL_MS = 200  # as ``cluster.sync_interval_ms``: how soon a hand-over that raised is retried
MAP_POLL_INTERVAL_MS = 1000  # how soon a map stored by another process (``tjobs shards``) is seen


class LocalCoordinator(Coordinator):
    def __init__(
        self,
        shard_count: int,
        node_id: str = "local",
        health: DatabaseHealth | None = None,
        *,
        sync_interval_ms: int = SYNC_INTERVAL_MS,
        map_home: ShardMapHome | None = None,
        map_poll_interval_ms: int = MAP_POLL_INTERVAL_MS,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._all = frozenset(range(shard_count))
        self._owned: frozenset[int] = frozenset()
        self._handed: frozenset[int] | None = frozenset()  # what the listener last took (None: it raised)
        self._on_change: OwnershipListener | None = None
        self._sync_interval_s = sync_interval_ms / 1000
        self._retry: asyncio.Task[None] | None = None
        self.node_id = node_id
        self._health = health  # shown in describe(); pausing is the runner's (wired by the node)
        self._pools = LocalPoolRegistry(monotonic_s)  # one process: the registry is the view
        self._map_home: ShardMapHome = map_home or MemoryShardMapHome()
        self._map_watch = ShardMapWatch()
        self._map_poll_s = map_poll_interval_ms / 1000
        self._map_poll: asyncio.Task[None] | None = None
        self._figures: dict[str, Any] | None = None  # the one node's runtime figures, as published

    async def start(self, on_change: OwnershipListener) -> None:
        self._on_change = on_change
        self._owned = self._all
        if not await self._hand_over():
            self._retry = asyncio.create_task(self._retry_until_taken(), name="tjobs-local-ownership")
        if self._map_watch.listener is not None:
            self._map_poll = asyncio.create_task(self._poll_shard_map(), name="tjobs-local-shard-map")

    async def stop(self) -> None:
        # each cancelled again if a driver's wait_for lost the cancellation (gh-86296)
        if self._map_poll is not None:
            await stop_task(self._map_poll)
            self._map_poll = None
        if self._retry is not None:
            await stop_task(self._retry)
            self._retry = None
        self._owned = frozenset()
        await self._hand_over()

    def owned_jobs(self) -> frozenset[int]:
        return self._owned

    def may_fire(self, now_ms: int) -> bool:
        return bool(self._owned)

    def describe(self) -> dict[str, object]:
        view: dict[str, object] = {
            "mode": "embedded",
            "node": self.node_id,
            "nodes": [{"id": self.node_id, "healthy": True}],
            "owned_jobs": len(self._owned),
            "fenced": None,
        }
        if self._health is not None:
            view["database_servers"] = self._health.describe()
        return view

    # ---- executor pools (in process: every read is current) ---------------------------------------------

    async def register_executor(self, app_id: str, pool: str, executor: Executor) -> bool:
        return self._pools.register(app_id, pool, executor)

    async def renew_executor(self, app_id: str, pool: str, executor_id: str) -> Executor | None:
        return self._pools.renew(app_id, pool, executor_id)

    def renew_executor_now(self, app_id: str, pool: str, executor_id: str) -> RenewNow:
        return self._pools.renew(app_id, pool, executor_id)  # in process: always at once

    async def deregister_executor(self, app_id: str, pool: str, executor_id: str) -> bool:
        return self._pools.deregister(app_id, pool, executor_id)

    async def pool_executors(self, app_id: str, pool: str) -> list[Executor]:
        return self._pools.executors(app_id, pool)

    async def app_pools(self, app_id: str) -> dict[str, list[Executor]]:
        return self._pools.pools(app_id)

    def live_executors(self, app_id: str, pool: str) -> tuple[Executor, ...]:
        return self._pools.live(app_id, pool)

    async def pool_leases(self, app_id: str, pool: str | None = None) -> dict[str, list[ExecutorLease]]:
        return self._pools.leases(app_id, pool)

    # ---- the node's runtime figures (one node: kept in memory) --------------------------------------

    async def publish_node_figures(self, figures: Mapping[str, Any]) -> None:
        self._figures = dict(figures)

    async def node_figures(self) -> dict[str, dict[str, Any]]:
        return {} if self._figures is None else {self.node_id: dict(self._figures)}

    async def _retry_until_taken(self) -> None:
        """The sync of a coordinator whose ownership never changes: hand the set again until taken."""
        while True:
            await asyncio.sleep(self._sync_interval_s)
            if await self._hand_over():
                return

    async def _hand_over(self) -> bool:
        """Hand the owned set to the listener unless it took that set already; whether it holds it now.
        A listener that raises is logged; the caller hands the set again (start's retry) or not (stop)."""
        owned = self._owned
        if owned == self._handed or self._on_change is None:
            return True
        self._handed = None
        try:
            await self._on_change(owned)
        except Exception as error:
            logger.warning(
                "the ownership listener did not take %d jobs (%s)",
                len(owned),
                error,
                extra={"action": "ownership_listener_failed"},
            )
            return False
        self._handed = owned
        return True

    # ---- the shard map ------------------------------------------------------------------------------

    async def read_shard_map(self) -> ShardMap | None:
        return await self._map_home.read_shard_map()

    async def seed_shard_map(self, seed: ShardMap) -> ShardMap:
        return await seed_in(self._map_home, seed)

    async def replace_shard_map(self, new: ShardMap, expected_epoch: int) -> bool:
        stored = await replace_in(self._map_home, new, expected_epoch)
        if stored and self._map_poll is not None:
            await self._map_watch.offer(new)
        return stored

    def watch_shard_map(self, listener: ShardMapListener) -> None:
        self._map_watch.listener = listener

    async def _poll_shard_map(self) -> None:
        while True:
            try:
                await self._map_watch.offer(await self._map_home.read_shard_map())
            except Exception as error:  # the store is down: routing stays as it is until it answers
                logger.warning("shard map not read (%s)", error, extra={"action": "shard_map_read_failed"})
            await asyncio.sleep(self._map_poll_s)
