"""The cluster coordinator: membership, the dispatcher, per-group election and self-fencing, on etcd.

Keys, under ``/tjobs/<cluster name>/``: :mod:`tjobs.cluster.etcd_view`. The dispatcher (the leader and
its plan): :mod:`tjobs.cluster.etcd_dispatcher`; the session fence's records:
:mod:`tjobs.cluster.etcd_sessions`; the shard map's key: :mod:`tjobs.cluster.etcd_shard_map`; the clock
check: :mod:`tjobs.cluster.clock_check`.

Executor pools have a root of their own, ``/tjobs-pools/<cluster name>/``, with one lease per executor
(:mod:`tjobs.cluster.etcd_pools`), checked every ``pool_sync_interval_ms`` and read whole when they changed.
So do the nodes' runtime figures, ``/tjobs-figures/<cluster name>/``, one key per node on its lease
(:mod:`tjobs.cluster.etcd_figures`).

One lease per node (``lease_ttl_s``, kept alive every quarter TTL) carries its member key, its group
holds and, on the leader, the leader key: when the node dies, or stalls past its TTL, etcd deletes all
of them at once, and when it stops gracefully it revokes the lease, which hands everything off at once.

Every ``sync_interval_ms`` each node reads the whole prefix in one range request and reconciles: the
leader re-packs (:func:`tjobs.cluster.plan.pack`) when membership or health changed and at every
cycle, and publishes the plan with a compare-and-set on its revision; each node takes the holder key
of a group it is the planned primary of, or a backup of whose every node ahead of it is gone or
unhealthy (create-if-absent transaction with its lease); a node holding a group it should no longer
hold stops firing its shards first and then deletes the key. Reading state instead of watching
it keeps one code path for start, etcd restarts and lost events (an aetcd watch raises when etcd
restarts); the poll period only adds to the take-over time, which the TTL dominates.

Self-fencing (:meth:`EtcdCoordinator.may_fire`): false once ``last keepalive sent + TTL − margin``
has passed on the monotonic clock, or once *no* database server has answered for more than
``db_unreachable_max_s``, or while the node's clock disagrees with the database's by more than
``clock_skew_max_ms`` (:mod:`tjobs.cluster.clock_check`; measured once before the node takes any job,
then every few seconds, and a step of its wall clock is seen at once); the sync loop then releases
every job (ownership becomes empty). The fire
transaction's compare-and-set keeps correctness in the brief moments two nodes both fire.

One unreachable server among several does not fence the node: it pauses only that server's shards
locally (:class:`tjobs.cluster.db_health.DatabaseHealth`, wired to the runner by the node) and says so in
its member record (:mod:`tjobs.cluster.reachability`), and when another node reaches that server the
leader re-packs that server's shards onto nodes that reach it (a partition of one node from one server).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import aetcd

from sharding.shard_map import ShardMap
from tjobs.clock import Clock
from tjobs.cluster.base import Coordinator, OwnershipListener, RenewNow, ShardMapListener
from tjobs.cluster.clock_check import CLOCK_CHECK_INTERVAL_S, ClockCheck
from tjobs.cluster.db_health import DatabaseHealth
from tjobs.cluster.etcd_dispatcher import EtcdDispatcher
from tjobs.cluster.etcd_figures import EtcdNodeFigures
from tjobs.cluster.etcd_pools import EtcdPoolRegistry
from tjobs.cluster.etcd_sessions import EtcdSessionFence
from tjobs.cluster.etcd_shard_map import EtcdShardMapStore
from tjobs.cluster.etcd_view import ETCD_CALL_TIMEOUT_S, SHARD_MAP_KEY, ClusterView, read_view
from tjobs.cluster.limit_shares import SOLE_NODE, Membership, members_share
from tjobs.cluster.reachability import ReachRecord
from tjobs.cluster.shard_maps import ShardMapWatch
from tjobs.pools.model import Executor, ExecutorLease
from tjobs.settings import ClusterSettings
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

BACKUP_GRACE_S = 2.0  # a backup takes an unheld group after this long even if a node ahead looks alive


def _host_port(endpoint: str) -> tuple[str, int]:
    parts = urlsplit(endpoint if "//" in endpoint else f"http://{endpoint}")
    return parts.hostname or "127.0.0.1", parts.port or 2379


class EtcdCoordinator(Coordinator):
    def __init__(
        self,
        settings: ClusterSettings,
        *,
        node_id: str,
        address: str,
        shard_count: int,
        cycle_s: int,
        store: TaskStore,
        clock: Clock,
        loads: Callable[[], Awaitable[dict[int, int]]] | None = None,
        health: DatabaseHealth | None = None,
    ) -> None:
        if not settings.etcd_endpoints:
            raise ValueError("cluster.etcd_endpoints is empty")
        self.settings = settings
        self.node_id = node_id
        self.address = address
        self.shard_count = shard_count
        self.cycle_ms = cycle_s * 1000
        self._clock = clock
        self._prefix = f"/tjobs/{settings.name}/".encode()
        self._ttl_s = settings.lease_ttl_s
        self._endpoint_index = 0
        self._client: aetcd.Client | None = None
        self._lease_id: int | None = None
        self._lease_deadline = 0.0  # monotonic: last keepalive sent + TTL - margin
        # Per-server database health: the node's (started by the node), or one of our own.
        self._own_health = health is None
        self._health = health or DatabaseHealth(store, shard_count)
        self._reach = ReachRecord(int(settings.db_recovery_hold_s * 1000))
        self._fenced_logged: str | None = None  # the fence reason last logged
        self._clock_check = ClockCheck(store, clock, settings.clock_skew_max_ms)
        self._registered_value: bytes | None = None
        self._on_change: OwnershipListener | None = None
        self._owned: frozenset[int] = frozenset()
        self._handed_owned: frozenset[int] | None = frozenset()  # what the listener last took (None: failed)
        self._handing = asyncio.Lock()
        self._etcd_failed_at = float("-inf")  # monotonic: the latest failed etcd call or lost lease
        self._held: set[int] = set()
        self._unheld_since: dict[int, float] = {}
        self._view = ClusterView()
        self._membership = SOLE_NODE  # from the members of the last view read (limit shares)
        self._last_sync = 0.0
        self.failovers = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        self._sync_lock = asyncio.Lock()
        self._pools = EtcdPoolRegistry(self._etcd, settings.name, clock.now_ms)
        self._figures = EtcdNodeFigures(self._etcd, settings.name)
        self._map_watch = ShardMapWatch()
        self._shard_maps = EtcdShardMapStore(self._key(SHARD_MAP_KEY), lambda: self._client, self._new_client)
        self._dispatcher = EtcdDispatcher(
            node_id=node_id,
            shard_count=shard_count,
            cycle_ms=self.cycle_ms,
            store=store,
            clock=clock,
            loads=loads,
            client=self._etcd,
            key=self._key,
            healthy=lambda: self.healthy,
            lease_id=lambda: self._lease_id,
        )
        self._sessions = EtcdSessionFence(
            node_id=node_id,
            store=store,
            ttl_s=self._ttl_s,
            client=self._etcd,
            key=lambda node: self._key("sessions", node),
        )

    @property
    def is_leader(self) -> bool:
        """This node is the dispatcher leader (as of its last sync)."""
        return self._dispatcher.is_leader

    @property
    def clock_skew_ms(self) -> int:
        """The database's clock minus this node's, now (:attr:`ClockCheck.offset_ms`)."""
        return self._clock_check.offset_ms

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self, on_change: OwnershipListener) -> None:
        self._on_change = on_change
        self._running = True
        self._client = self._new_client()
        if self._own_health:
            await self._health.start()
        await self._clock_check.check()  # before any group is taken: a skewed node never owns a job
        try:
            await self._ensure_lease()
        except Exception as error:  # etcd down at start: the sync loop keeps trying
            logger.warning("etcd not reachable at start (%s); retrying", error, extra={"action": "etcd_unreachable"})
        self._tasks = [
            asyncio.create_task(self._keepalive_loop(), name="tjobs-etcd-keepalive"),
            asyncio.create_task(self._clock_loop(), name="tjobs-clock-check"),
            asyncio.create_task(self._sync_loop(), name="tjobs-etcd-sync"),
            asyncio.create_task(self._pool_sync_loop(), name="tjobs-etcd-pool-sync"),
        ]

    async def stop(self) -> None:
        """Graceful hand-off: stop firing, then delete the sessions record and revoke the lease (members,
        holds, leadership go at once), and only then stop the rest."""
        self._running = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._dispatcher.cancel()
        try:
            await self._set_owned(frozenset())
        except Exception as error:  # the resignation goes on: a successor must not wait for the lease to end
            logger.warning(
                "the ownership listener failed on the hand-off (%s)",
                error,
                extra={"action": "ownership_listener_failed"},
            )
        # Resign right after the hand-off: the keepalive is cancelled, so a slower step before this (the
        # health check's stop once hung) lets the lease run out with the sessions still recorded, and a
        # successor ends the sessions of this node while it drains its deliveries.
        if self._client is not None and self._lease_id is not None:
            try:
                async with asyncio.timeout(ETCD_CALL_TIMEOUT_S):
                    # It fires nothing any more, so no lock of its can hold a successor up; its sessions
                    # still write the outcomes of deliveries it drains, which a successor must not end.
                    await self._client.delete(self._key("sessions", self.node_id))
                    self._sessions.published = None
                    await self._client.revoke_lease(self._lease_id)
                logger.info("resigned: lease revoked", extra={"action": "lease_revoked"})
            except Exception as error:
                logger.warning(
                    "could not revoke the lease (%s); it ends in %d s",
                    error,
                    self._ttl_s,
                    extra={"action": "lease_revoke_failed"},
                )
        self._lease_id = None
        self._held.clear()
        if self._own_health:
            await self._health.stop()
        await self._pools.close()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    def owned_jobs(self) -> frozenset[int]:
        return self._owned

    def may_fire(self, now_ms: int) -> bool:
        return bool(self._owned) and self._fenced_reason() is None

    # ---- fencing --------------------------------------------------------------------------------

    def _fenced_reason(self) -> str | None:
        now = time.monotonic()
        if self._lease_id is None or now >= self._lease_deadline:
            return "lease"
        if self._health.all_unreachable_for_s() > self.settings.db_unreachable_max_s:
            return "database"
        if not self._clock_check.ok:
            return "clock"
        return None

    @property
    def healthy(self) -> bool:
        return self._clock_check.ok and self._health.all_unreachable_for_s() <= self.settings.db_unreachable_max_s

    # ---- etcd plumbing ---------------------------------------------------------------------------

    def _new_client(self) -> aetcd.Client:
        endpoints = self.settings.etcd_endpoints
        host, port = _host_port(endpoints[self._endpoint_index % len(endpoints)])
        return aetcd.Client(host=host, port=port, timeout=ETCD_CALL_TIMEOUT_S)

    async def _rotate_endpoint(self) -> None:
        if len(self.settings.etcd_endpoints) < 2:
            return
        old = self._client
        self._endpoint_index += 1
        self._client = self._new_client()
        if old is not None:
            with contextlib.suppress(Exception):
                await old.close()

    def _etcd(self) -> aetcd.Client:
        if self._client is None:
            raise RuntimeError("coordinator not started")
        return self._client

    def _key(self, *parts: str) -> bytes:
        return self._prefix + "/".join(parts).encode()

    def _member_value(self) -> bytes:
        return json.dumps(
            {
                "node_id": self.node_id,
                "zone": self.settings.zone,
                "address": self.address,
                "healthy": self.healthy,
                "failovers": self.failovers,
                # to 10 ms: a re-registration only when it really moved (the read is ±half a round trip)
                "clock_offset_ms": round(self._clock_check.offset_ms, -1) if self._clock_check.measured else None,
                **self._reach.update(self._health.unreachable_servers(), self._clock.now_ms()),
            },
            sort_keys=True,
        ).encode()

    async def _ensure_lease(self) -> None:
        """Grant a lease and register if there is none; re-register when the member value changed."""
        client = self._etcd()
        if self._lease_id is None:
            sent = time.monotonic()
            lease = await client.lease(self._ttl_s)
            self._lease_id = int(lease.id)
            self._lease_deadline = sent + self._ttl_s - self.settings.fence_margin_ms / 1000
            self._registered_value = None
            self._sessions.published = None
            self._held.clear()
            logger.info("lease %x granted (ttl %d s)", self._lease_id, self._ttl_s, extra={"action": "lease_granted"})
        value = self._member_value()
        if value != self._registered_value:
            await client.put(self._key("members", self.node_id), value, lease=self._lease_id)
            if self._registered_value is None:
                logger.info(
                    "joined cluster %s as %s (zone %r)",
                    self.settings.name,
                    self.node_id,
                    self.settings.zone,
                    extra={"action": "member_joined"},
                )
            self._registered_value = value

    async def _keepalive_loop(self) -> None:
        interval_s = self._ttl_s / 4
        while self._running:
            lease_id = self._lease_id
            if lease_id is not None and self._client is not None:
                sent = time.monotonic()
                try:
                    async with asyncio.timeout(ETCD_CALL_TIMEOUT_S):
                        reply = await self._client.refresh_lease(lease_id)
                    if reply is None or int(reply.TTL) <= 0:
                        await self._lease_lost("etcd says the lease has ended")
                    elif self._lease_id == lease_id:
                        self._lease_deadline = sent + int(reply.TTL) - self.settings.fence_margin_ms / 1000
                except Exception as error:
                    self._etcd_failed_at = time.monotonic()
                    logger.warning("lease keepalive failed (%s)", error, extra={"action": "keepalive_failed"})
                    await self._rotate_endpoint()
            await asyncio.sleep(interval_s)

    async def _lease_lost(self, why: str) -> None:
        logger.error("lease lost: %s; stepping down", why, extra={"action": "lease_lost"})
        self._etcd_failed_at = time.monotonic()
        self._lease_id = None
        self._held.clear()
        self._dispatcher.is_leader = False
        await self._set_owned(frozenset())

    # ---- the one clock (tjobs.cluster.clock_check; database reachability is DatabaseHealth's) ---------

    async def _clock_loop(self) -> None:
        while self._running:
            await self._clock_check.check()
            await asyncio.sleep(CLOCK_CHECK_INTERVAL_S)

    # ---- the sync loop ------------------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        interval_s = self.settings.sync_interval_ms / 1000
        while self._running:
            try:
                await self.sync_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._etcd_failed_at = time.monotonic()
                logger.warning("cluster sync failed (%s)", error, extra={"action": "cluster_sync_failed"})
                if self._owned and self._fenced_reason() is not None:
                    await self._set_owned(frozenset())
            await asyncio.sleep(interval_s)

    async def sync_once(self) -> None:
        async with self._sync_lock:
            await self._sync()

    async def _sync(self) -> None:
        fenced = self._fenced_reason()
        if fenced == "lease" and self._lease_id is not None:
            # Our deadline passed without a keepalive answer: the lease may be gone; stop firing now.
            await self._set_owned(frozenset())
        await self._ensure_lease()
        await self._sessions.publish()
        view = await read_view(self._etcd(), self._prefix)
        self._view = view
        self._membership = members_share(view.members, self.node_id)
        self._last_sync = time.monotonic()
        lease_id = self._lease_id
        # Holds etcd shows as ours under the current lease; anything else was lost with a lease.
        self._held = {g for g, (node, lease) in view.holders.items() if node == self.node_id and lease == lease_id}
        await self._dispatcher.lead(view)
        await self._reconcile_groups(view)
        await self._map_watch.offer(view.shard_map)

    def membership(self) -> Membership:
        return self._membership

    # ---- executor pools (tjobs.cluster.etcd_pools) -------------------------------------------------------

    async def register_executor(self, app_id: str, pool: str, executor: Executor) -> bool:
        return await self._pools.register(app_id, pool, executor)

    async def renew_executor(self, app_id: str, pool: str, executor_id: str) -> Executor | None:
        return await self._pools.renew(app_id, pool, executor_id)

    def renew_executor_now(self, app_id: str, pool: str, executor_id: str) -> RenewNow:
        return self._pools.renew_now(app_id, pool, executor_id)

    async def deregister_executor(self, app_id: str, pool: str, executor_id: str) -> bool:
        return await self._pools.deregister(app_id, pool, executor_id)

    async def pool_executors(self, app_id: str, pool: str) -> list[Executor]:
        return await self._pools.executors(app_id, pool)

    async def app_pools(self, app_id: str) -> dict[str, list[Executor]]:
        return await self._pools.pools(app_id)

    def live_executors(self, app_id: str, pool: str) -> tuple[Executor, ...]:
        return self._pools.live(app_id, pool)

    async def pool_leases(self, app_id: str, pool: str | None = None) -> dict[str, list[ExecutorLease]]:
        return await self._pools.leases(app_id, pool)

    # ---- nodes' runtime figures (tjobs.cluster.etcd_figures) ---------------------------------------------

    async def publish_node_figures(self, figures: Mapping[str, Any]) -> None:
        await self._figures.publish(self.node_id, self._lease_id, figures)

    async def node_figures(self) -> dict[str, dict[str, Any]]:
        return await self._figures.read()

    async def _pool_sync_loop(self) -> None:
        interval_s = self.settings.pool_sync_interval_ms / 1000
        while self._running:
            try:
                await self._pools.sync()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the view stays as last read; etcd's own failures are the sync's
                logger.debug("pool sync failed (%s)", error, extra={"action": "pool_sync_failed"})
            await asyncio.sleep(interval_s)

    # ---- per-group election ------------------------------------------------------------------------

    async def _reconcile_groups(self, view: ClusterView) -> None:
        client = self._etcd()
        plan = view.plan
        now = time.monotonic()
        fenced = self._fenced_reason()
        if fenced != self._fenced_logged:
            if fenced is not None:
                logger.warning(
                    "fenced (%s): giving up my groups (lease %.1f s left, no database server answered for %.1f s)",
                    fenced,
                    self._lease_deadline - now,
                    self._health.all_unreachable_for_s(),
                    extra={"action": "fenced", "reason": fenced},
                )
            else:
                logger.info("no longer fenced", extra={"action": "unfenced"})
            self._fenced_logged = fenced
        to_release: set[int] = set()
        acquired = False
        for group_id in self._held:
            group = plan.group(group_id) if plan is not None else None
            if fenced is not None or group is None or self.node_id not in group.nodes:
                to_release.add(group_id)
                continue
            position = group.nodes.index(self.node_id)
            if any(view.available(node) for node in group.nodes[:position]):
                to_release.add(group_id)  # hand back to the planned primary (or an earlier backup)
        if fenced is None and plan is not None:
            for group in plan.groups:
                if self.node_id not in group.nodes or group.id in self._held:
                    continue
                if group.id in view.holders:
                    self._unheld_since.pop(group.id, None)
                    continue
                first_seen = self._unheld_since.setdefault(group.id, now)
                position = group.nodes.index(self.node_id)
                ahead_gone = not any(view.available(node) for node in group.nodes[:position])
                if not ahead_gone and now - first_seen < BACKUP_GRACE_S:
                    continue
                if await self._acquire(client, group.id):
                    acquired = True
                    self._unheld_since.pop(group.id, None)
                    if position > 0:
                        self.failovers += 1
                        logger.warning(
                            "took over group %d as backup #%d (primary %s)",
                            group.id,
                            position,
                            group.primary,
                            extra={"action": "group_failover", "group": group.id},
                        )
        held = self._held - to_release
        owned: set[int] = set()
        if plan is not None and fenced is None:
            for group in plan.groups:
                if group.id in held:
                    owned.update(group.shards)
        # Shards come by acquiring a group or by a re-plan growing a group already held (the leader
        # handed it a vanished primary's shards): either way a former owner may still hold their locks.
        if acquired or owned - self._owned or (self._sessions.deferred and owned):
            await self._sessions.end_former_owners(view, self._etcd_failed_at)
        await self._set_owned(frozenset(owned))
        for group_id in to_release:  # after the wheel dropped their shards
            key = self._key("holders", str(group_id))
            await client.transaction(
                compare=[client.transactions.value(key) == self._holder_value()],
                success=[client.transactions.delete(key)],
                failure=[],
            )
            self._held.discard(group_id)
            logger.info("released group %d", group_id, extra={"action": "group_released", "group": group_id})

    def _holder_value(self) -> bytes:
        return json.dumps({"node_id": self.node_id}).encode()

    async def _acquire(self, client: aetcd.Client, group_id: int) -> bool:
        key = self._key("holders", str(group_id))
        won, _ = await client.transaction(
            compare=[client.transactions.create(key) == 0],
            success=[client.transactions.put(key, self._holder_value(), lease=self._lease_id)],
            failure=[],
        )
        if won:
            self._held.add(group_id)
            logger.info("holding group %d", group_id, extra={"action": "group_acquired", "group": group_id})
        return bool(won)

    async def _set_owned(self, owned: frozenset[int]) -> None:
        """Hand ``owned`` to the listener; one that raised (a load failed: a database session ended
        under it, a server flapped) is handed the set again at the next call, even an unchanged one.
        One hand-over at a time: the keepalive loop (a lost lease) and the sync loop (a re-plan) both
        call this: a later call waits for the one in progress, and a set superseded while it waited is
        not handed at all (``owned_jobs`` says the newest at once)."""
        self._owned = owned
        async with self._handing:
            if owned is not self._owned or owned == self._handed_owned:
                return
            self._handed_owned = None
            if self._on_change is not None:
                await self._on_change(owned)
            self._handed_owned = owned

    # ---- the shard map (tjobs.cluster.etcd_shard_map) ------------------------------------------------------

    async def read_shard_map(self) -> ShardMap | None:
        return await self._shard_maps.read()

    async def seed_shard_map(self, seed: ShardMap) -> ShardMap:
        return await self._shard_maps.seed(seed)

    async def replace_shard_map(self, new: ShardMap, expected_epoch: int) -> bool:
        return await self._shard_maps.replace(new, expected_epoch)

    def watch_shard_map(self, listener: ShardMapListener) -> None:
        self._map_watch.listener = listener

    # ---- view ----------------------------------------------------------------------------------------

    def describe(self) -> dict[str, object]:
        view = self._view
        plan = view.plan
        now = time.monotonic()
        groups = []
        if plan is not None:
            for group in plan.groups:
                holder = view.holders.get(group.id)
                groups.append(
                    {
                        "id": group.id,
                        "primary": group.primary,
                        "backups": list(group.nodes[1:]),
                        "holder": holder[0] if holder else None,
                        "shards": len(group.shards),
                    }
                )
        return {
            "mode": "cluster",
            "cluster": self.settings.name,
            "node": self.node_id,
            "leader": view.leader,
            "is_leader": self.is_leader,
            "plan_version": plan.version if plan is not None else None,
            "plan_age_ms": self._clock.now_ms() - plan.created_at_ms if plan is not None else None,
            "nodes": [
                {
                    "id": node,
                    "zone": m.get("zone", ""),
                    "address": m.get("address", ""),
                    "healthy": m.get("healthy", True),
                    "failovers": m.get("failovers", 0),
                    "clock_offset_ms": m.get("clock_offset_ms"),
                }
                for node, m in sorted(view.members.items())
            ],
            "groups": groups,
            "owned_jobs": len(self._owned),
            "failovers": sum(int(m.get("failovers", 0)) for m in view.members.values()),
            "fenced": self._fenced_reason(),
            "lease_remaining_ms": max(int((self._lease_deadline - now) * 1000), 0) if self._lease_id else 0,
            "sync_lag_ms": int((now - self._last_sync) * 1000) if self._last_sync else None,
            "clock_skew_ms": self.clock_skew_ms,
            **self._clock_check.describe(),
            "database_servers": self._health.describe(),
        }
