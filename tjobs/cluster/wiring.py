"""Cluster mode wiring: the etcd coordinator and the hot tier a node uses when ``cluster.etcd_endpoints``
is set (Redis when ``cluster.redis_url`` is, else the DB poll)."""

from __future__ import annotations

from tjobs.clock import Clock
from tjobs.cluster.db_health import DatabaseHealth
from tjobs.cluster.etcd import EtcdCoordinator
from tjobs.hot_tier.base import HotTier
from tjobs.hot_tier.dbpoll import DbPollHotTier
from tjobs.hot_tier.local import LocalHotTier
from tjobs.hot_tier.redis import RedisHotTier
from tjobs.settings import Settings
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts import HotChanges


def cluster_enabled(settings: Settings) -> bool:
    return bool(settings.cluster.etcd_endpoints)


def build_coordinator(
    settings: Settings, node_id: str, store: TaskStore, clock: Clock, health: DatabaseHealth | None = None
) -> EtcdCoordinator:
    cluster = settings.cluster
    address = cluster.advertise_address or f"http://{settings.api.host}:{settings.api.port}"
    return EtcdCoordinator(
        cluster,
        node_id=node_id,
        address=address,
        shard_count=settings.storage.parsed_topology().shard_count,
        cycle_s=settings.scheduler.cycle_s,
        store=store,
        clock=clock,
        health=health,
    )


def build_hot_tier(settings: Settings, node_id: str, clock: Clock, store: HotChanges) -> HotTier:
    """The hot tier ``cluster.hot_tier`` names; the DB poll logs its changes in ``store``."""
    cluster = settings.cluster
    # A wheel holds at most the current and the next cycle; later instants wait for their cycle load.
    near_ms = 2 * settings.scheduler.cycle_s * 1000
    mode = cluster.hot_tier
    if mode == "auto":
        mode = "redis" if cluster.redis_url else "dbpoll"
    if mode == "redis":
        if not cluster.redis_url:
            raise ValueError("cluster.hot_tier is 'redis' but cluster.redis_url is not set")
        return RedisHotTier(
            cluster.redis_url,
            prefix=f"tjobs:{cluster.name}:hot",
            clock=clock,
            near_ms=near_ms,
            poll_interval_ms=cluster.redis_poll_interval_ms,
        )
    if mode == "dbpoll":
        return DbPollHotTier(
            store.hot_change_log(),
            origin=node_id,
            clock=clock,
            near_ms=near_ms,
            poll_interval_ms=cluster.hot_poll_interval_ms,
        )
    return LocalHotTier()
