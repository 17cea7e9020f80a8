"""The cluster coordinator: membership, the dispatcher, per-group election and self-fencing, on etcd.

Keys, under ``/tjobs/<cluster name>/``::

    members/<node id>   {"node_id", "zone", "address", "healthy", "failovers"}   on the node's lease
    leader              <node id>                                               on the leader's lease
    plan                {"version", "shard_count", "groups": [{"id", "shards", "nodes"}], ...}
    holders/<group id>  {"node_id", "since_ms"}                                 on the holder's lease
    sessions/<node id>  {"servers": {server: {"booted_at_s", "ids"}}}          no lease (outlives it)
    shard_map           {"epoch", "servers", "placement"} (sharding/shard_map.py) no lease (outlives all)

Executor pools have a root of their own, ``/tjobs-pools/<cluster name>/``, with one lease per executor
(:mod:`tjobs.cluster.etcd_pools`), checked every ``pool_sync_interval_ms`` and read whole when they changed.

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
``clock_skew_max_ms``; the sync loop then releases every job (ownership becomes empty). The fire
transaction's compare-and-set keeps correctness in the brief moments two nodes both fire.

One unreachable server among several does not fence the node: another node could not reach it any
better, so the node keeps its groups and pauses only that server's shards locally
(:class:`tjobs.cluster.db_health.DatabaseHealth`, wired to the runner by the node).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aetcd

from sharding.shard_map import ShardMap
from tjobs.clock import Clock
from tjobs.cluster.base import Coordinator, OwnershipListener, RenewNow, ShardMapListener
from tjobs.cluster.db_health import DatabaseHealth
from tjobs.cluster.etcd_pools import EtcdPoolRegistry
from tjobs.cluster.plan import Member, Plan, needs_replan, pack
from tjobs.cluster.session_fence import RecordedSessions, end_sessions_of, parse_sessions, sessions_value
from tjobs.cluster.shard_maps import ShardMapWatch
from tjobs.pools.model import Executor
from tjobs.settings import ClusterSettings
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

ETCD_CALL_TIMEOUT_S = 2
CLOCK_CHECK_INTERVAL_S = 5.0
BACKUP_GRACE_S = 2.0  # a backup takes an unheld group after this long even if a node ahead looks alive
SHARD_MAP_KEY = "shard_map"


@dataclass(slots=True)
class ClusterView:
    """What one read of the prefix showed."""

    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    leader: str | None = None
    plan: Plan | None = None
    plan_revision: int = 0
    holders: dict[int, tuple[str, int]] = field(default_factory=dict)  # group -> (node, lease id)
    sessions: dict[str, RecordedSessions] = field(default_factory=dict)  # node -> its database sessions
    shard_map: ShardMap | None = None


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
        self._store = store
        self._clock = clock
        self._loads_source = loads or self._count_active
        self._prefix = f"/tjobs/{settings.name}/".encode()
        self._ttl_s = settings.lease_ttl_s
        self._endpoint_index = 0
        self._client: aetcd.Client | None = None
        self._lease_id: int | None = None
        self._lease_deadline = 0.0  # monotonic: last keepalive sent + TTL - margin
        # Per-server database health: the node's (started by the node), or one of our own.
        self._own_health = health is None
        self._health = health or DatabaseHealth(store, shard_count)
        self._fenced_logged: str | None = None  # the fence reason last logged
        self._clock_ok = True
        self.clock_skew_ms = 0
        self._registered_value: bytes | None = None
        self._published_sessions: bytes | None = None
        self._on_change: OwnershipListener | None = None
        self._owned: frozenset[int] = frozenset()
        self._handed_owned: frozenset[int] | None = frozenset()  # what the listener last took (None: failed)
        self._handing = asyncio.Lock()
        self._etcd_failed_at = float("-inf")  # monotonic: the latest failed etcd call or lost lease
        self._session_fence_deferred = False
        self._held: set[int] = set()
        self._unheld_since: dict[int, float] = {}
        self._view = ClusterView()
        self._last_sync = 0.0
        self._last_plan_ms = 0
        self._loads: dict[int, int] = {}
        self._loads_task: asyncio.Task[None] | None = None
        self.failovers = 0
        self.is_leader = False
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        self._sync_lock = asyncio.Lock()
        self._pools = EtcdPoolRegistry(self._etcd, settings.name, clock.now_ms)
        self._map_watch = ShardMapWatch()

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self, on_change: OwnershipListener) -> None:
        self._on_change = on_change
        self._running = True
        self._client = self._new_client()
        if self._own_health:
            await self._health.start()
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
        """Graceful hand-off: stop firing, then revoke the lease (members, holds, leadership go at once)."""
        self._running = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._loads_task is not None:
            self._loads_task.cancel()
        try:
            await self._set_owned(frozenset())
        except Exception as error:  # the resignation goes on: a successor must not wait for the lease to end
            logger.warning(
                "the ownership listener failed on the hand-off (%s)",
                error,
                extra={"action": "ownership_listener_failed"},
            )
        if self._own_health:
            await self._health.stop()
        if self._client is not None and self._lease_id is not None:
            try:
                async with asyncio.timeout(ETCD_CALL_TIMEOUT_S):
                    # It fires nothing any more, so no lock of its can hold a successor up; its sessions
                    # still write the outcomes of deliveries it drains, which a successor must not end.
                    await self._client.delete(self._key("sessions", self.node_id))
                    self._published_sessions = None
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
        if not self._clock_ok:
            return "clock"
        return None

    @property
    def healthy(self) -> bool:
        return self._clock_ok and self._health.all_unreachable_for_s() <= self.settings.db_unreachable_max_s

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
            self._published_sessions = None
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
        self.is_leader = False
        await self._set_owned(frozenset())

    # ---- the one clock (database reachability is DatabaseHealth's) ----------------------------------

    async def _clock_loop(self) -> None:
        while self._running:
            await self._check_clock()
            await asyncio.sleep(CLOCK_CHECK_INTERVAL_S)

    async def _check_clock(self) -> None:
        try:
            before = self._clock.now_ms()
            async with asyncio.timeout(2.0):
                database_ms = await self._store.database_now_ms()
            after = self._clock.now_ms()
        except Exception:
            return  # reachability is the health loop's business
        skew_ms = database_ms - (before + after) // 2
        self.clock_skew_ms = skew_ms
        ok = abs(skew_ms) <= self.settings.clock_skew_max_ms + (after - before) // 2
        if not ok:
            logger.error(
                "CLOCK SKEW: this node's clock is %d ms %s the database's (limit %d ms); giving up my groups",
                abs(skew_ms),
                "behind" if skew_ms > 0 else "ahead of",
                self.settings.clock_skew_max_ms,
                extra={"action": "clock_skew", "skew_ms": skew_ms},
            )
        elif not self._clock_ok:
            logger.info(
                "clock agrees with the database again (%d ms)",
                skew_ms,
                extra={"action": "clock_skew_cleared"},
            )
        self._clock_ok = ok

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
        await self._publish_sessions()
        view = await self._read()
        self._view = view
        self._last_sync = time.monotonic()
        lease_id = self._lease_id
        # Holds etcd shows as ours under the current lease; anything else was lost with a lease.
        self._held = {g for g, (node, lease) in view.holders.items() if node == self.node_id and lease == lease_id}
        await self._lead(view)
        await self._reconcile_groups(view)
        await self._map_watch.offer(view.shard_map)

    async def _read(self) -> ClusterView:
        client = self._etcd()
        result = await client.get_prefix(self._prefix)
        view = ClusterView()
        for kv in result:
            name = bytes(kv.key)[len(self._prefix) :].decode()
            if name.startswith("members/"):
                with contextlib.suppress(ValueError):
                    view.members[name.removeprefix("members/")] = json.loads(kv.value)
            elif name == "leader":
                view.leader = bytes(kv.value).decode()
            elif name == "plan":
                view.plan = Plan.from_json(json.loads(kv.value))
                view.plan_revision = int(kv.mod_revision)
            elif name.startswith("holders/"):
                holder = json.loads(kv.value)
                view.holders[int(name.removeprefix("holders/"))] = (str(holder["node_id"]), int(kv.lease))
            elif name == SHARD_MAP_KEY:
                try:
                    view.shard_map = ShardMap.from_json(json.loads(kv.value))
                except ValueError as error:  # never route by a map that does not parse: keep the last
                    logger.error("unreadable shard map in etcd (%s)", error, extra={"action": "shard_map_unreadable"})
            elif name.startswith("sessions/"):
                node_id = name.removeprefix("sessions/")
                with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                    view.sessions[node_id] = parse_sessions(node_id, kv.value, int(kv.mod_revision))
        return view

    # ---- database sessions: a former owner's end when its jobs are taken over ------------------------

    async def _publish_sessions(self) -> None:
        """Record this node's database sessions (:mod:`tjobs.cluster.session_fence`) when they changed."""
        value = sessions_value(self._store)
        if value is None or value == self._published_sessions:
            return
        await self._etcd().put(self._key("sessions", self.node_id), value)
        self._published_sessions = value

    async def _end_former_owners_sessions(self, view: ClusterView) -> None:
        """Before firing newly acquired jobs: end the sessions of every node whose lease is gone, so
        no transaction of a frozen former owner holds row locks or can commit.

        A missing member key means its node is gone only while etcd serves this node normally: when
        this node failed an etcd call or lost its lease within the last lease TTL, every lease may
        have ended together (etcd frozen or restarted past the TTL) and the others are re-registering.
        The ending then waits until this node has talked to etcd without failure for a lease TTL and
        is decided on the view of that sync (a node back by then keeps its sessions); the locks of a
        frozen former owner are bounded meanwhile by the lock-wait timeout."""
        gone = [
            recorded
            for node_id, recorded in view.sessions.items()
            if node_id != self.node_id and node_id not in view.members
        ]
        quiet_for_s = time.monotonic() - self._etcd_failed_at
        if gone and quiet_for_s < self._ttl_s:
            if not self._session_fence_deferred:
                logger.info(
                    "ending the sessions of %s deferred: etcd failed %.1f s ago, their leases may have ended with it",
                    ", ".join(r.node_id for r in gone),
                    quiet_for_s,
                    extra={"action": "db_sessions_end_deferred"},
                )
            self._session_fence_deferred = True
            return
        self._session_fence_deferred = False
        client = self._etcd()
        for recorded in gone:
            node_id = recorded.node_id
            await end_sessions_of(self._store, recorded)
            key = self._key("sessions", node_id)
            await client.transaction(
                compare=[client.transactions.mod(key) == recorded.revision],
                success=[client.transactions.delete(key)],
                failure=[],
            )

    def _available(self, view: ClusterView, node_id: str) -> bool:
        member = view.members.get(node_id)
        return member is not None and bool(member.get("healthy", True))

    # ---- the dispatcher (leader only) ----------------------------------------------------------------

    async def _lead(self, view: ClusterView) -> None:
        client = self._etcd()
        if view.leader is None and self.healthy:
            won, _ = await client.transaction(
                compare=[client.transactions.create(self._key("leader")) == 0],
                success=[client.transactions.put(self._key("leader"), self.node_id.encode(), lease=self._lease_id)],
                failure=[],
            )
            if won:
                logger.info("elected dispatcher leader", extra={"action": "leader_elected"})
                view.leader = self.node_id
        was_leader = self.is_leader
        self.is_leader = view.leader == self.node_id
        if not self.is_leader:
            return
        if not self.healthy:
            await client.delete(self._key("leader"))  # let a healthy node dispatch
            self.is_leader = False
            return
        if not was_leader:
            self._last_plan_ms = view.plan.created_at_ms if view.plan is not None else 0
            self._refresh_loads()
        live = [
            Member(node, str(m.get("zone", "")), str(m.get("address", "")))
            for node, m in view.members.items()
            if self._available(view, node)
        ]
        now_ms = self._clock.now_ms()
        cycle_due = now_ms - self._last_plan_ms >= self.cycle_ms
        if not live or not (needs_replan(view.plan, live, self.shard_count) or cycle_due):
            return
        if cycle_due:
            self._refresh_loads()
        previous = view.plan
        version = (previous.version if previous is not None else 0) + 1
        plan = pack(previous, live, self.shard_count, self._loads, version=version, now_ms=now_ms, leader=self.node_id)
        if previous is not None and plan.groups == previous.groups:
            self._last_plan_ms = now_ms  # nothing to move this cycle
            return
        compare = (
            client.transactions.mod(self._key("plan")) == view.plan_revision
            if view.plan is not None
            else client.transactions.create(self._key("plan")) == 0
        )
        published, _ = await client.transaction(
            compare=[compare, client.transactions.value(self._key("leader")) == self.node_id.encode()],
            success=[client.transactions.put(self._key("plan"), json.dumps(plan.to_json()).encode())],
            failure=[],
        )
        if published:
            self._last_plan_ms = now_ms
            view.plan = plan
            logger.info(
                "published plan v%d: %d groups over %d nodes",
                plan.version,
                len(plan.groups),
                len(live),
                extra={"action": "jobs_rebalanced", "plan_version": plan.version},
            )

    def _refresh_loads(self) -> None:
        if self._loads_task is not None and not self._loads_task.done():
            return

        async def refresh() -> None:
            try:
                self._loads = await self._loads_source()
            except Exception as error:
                logger.warning(
                    "shard load estimate failed (%s); packing by count",
                    error,
                    extra={"action": "load_estimate_failed"},
                )

        self._loads_task = asyncio.create_task(refresh(), name="tjobs-load-estimate")

    async def _count_active(self) -> dict[int, int]:
        loads: dict[int, int] = {}
        for shard in range(self.shard_count):
            loads[shard] = await self._store.count_active(shard)
        return loads

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
            if any(self._available(view, node) for node in group.nodes[:position]):
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
                ahead_gone = not any(self._available(view, node) for node in group.nodes[:position])
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
        if acquired or owned - self._owned or (self._session_fence_deferred and owned):
            await self._end_former_owners_sessions(view)
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

    # ---- the shard map ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _map_client(self) -> AsyncIterator[aetcd.Client]:
        """The running client, or one of its own before ``start`` and after ``stop``."""
        if self._client is not None:
            yield self._client
            return
        client = self._new_client()
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def _stored_map(self, client: aetcd.Client) -> tuple[ShardMap | None, int]:
        """The stored map and its key's mod revision (0: no map)."""
        async with asyncio.timeout(ETCD_CALL_TIMEOUT_S):
            kv = await client.get(self._key(SHARD_MAP_KEY))
        if kv is None:
            return None, 0
        return ShardMap.from_json(json.loads(kv.value)), int(kv.mod_revision)

    async def read_shard_map(self) -> ShardMap | None:
        async with self._map_client() as client:
            return (await self._stored_map(client))[0]

    async def seed_shard_map(self, seed: ShardMap) -> ShardMap:
        key = self._key(SHARD_MAP_KEY)
        async with self._map_client() as client:
            async with asyncio.timeout(ETCD_CALL_TIMEOUT_S):
                await client.transaction(
                    compare=[client.transactions.create(key) == 0],
                    success=[client.transactions.put(key, json.dumps(seed.to_json()).encode())],
                    failure=[],
                )
            stored, _ = await self._stored_map(client)
        if stored is None:
            raise RuntimeError("the shard map was seeded but reads back as missing")
        return stored

    async def replace_shard_map(self, new: ShardMap, expected_epoch: int) -> bool:
        if new.epoch <= expected_epoch:
            return False
        key = self._key(SHARD_MAP_KEY)
        async with self._map_client() as client:
            stored, revision = await self._stored_map(client)
            if stored is None or stored.epoch != expected_epoch:
                return False
            async with asyncio.timeout(ETCD_CALL_TIMEOUT_S):
                replaced, _ = await client.transaction(
                    compare=[client.transactions.mod(key) == revision],
                    success=[client.transactions.put(key, json.dumps(new.to_json()).encode())],
                    failure=[],
                )
        return bool(replaced)

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
            "database_servers": self._health.describe(),
        }
