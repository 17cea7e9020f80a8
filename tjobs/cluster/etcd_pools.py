"""The executor pools' registry of the etcd coordinator: one etcd lease per executor (the contract:
:class:`tjobs.cluster.base.Coordinator`, its pool methods).

Keys, under ``/tjobs-pools/<cluster name>/`` (a root of their own, so the coordinator's sync, which
reads ``/tjobs/<cluster name>/`` whole every ``sync_interval_ms``, never carries them)::

    <app id, percent-encoded>/<pool>/<executor id>   Executor.to_json()   on the executor's lease

Registering grants a lease of :func:`lease_ttl_s` (2 x the executor's TTL - 1 s) and puts the key on it
(or, for an executor still registered with the same TTL, renews its lease and rewrites the key only if
something changed). A heartbeat is at most one lease renewal (``LeaseKeepAlive``): no write, no
revision, and nothing in any database (renewals go over one long-lived keepalive stream:
:mod:`tjobs.cluster.etcd_keepalive`); a heartbeat through a node that renewed that lease recently
enough that more than half the executor's TTL of it is left, while the executor is in its view, renews
nothing (the next heartbeat, due within half a TTL, comes while it lasts). The lease's length is what
etcd answered at the last renewal, so a lease granted by an older node (the executor's TTL) is
renewed every half TTL as before. etcd deletes the key when the lease ends, so an executor that stops
renewing is out within 2 x its TTL of its last heartbeat; deregistering revokes the lease.

Every node keeps a view of all pools, synced every ``cluster.pool_sync_interval_ms``
(:meth:`EtcdPoolRegistry.sync`: one keys-only range for the keys written since the last whole read, and
the whole root read again only when there are some or the key count changed), which delivery reads per
attempt without waiting
(:meth:`EtcdPoolRegistry.live`); a change made through this node shows in it at once. The view also
gives each executor's lease id, so a heartbeat through any node usually needs no read.

What an operator reads of an executor's lease (:meth:`EtcdPoolRegistry.leases`, for ``GET
/v1/pools/{pool}`` and the console): one ``LeaseTimeToLive`` per executor (to the second) gives when it
ends and when it was last renewed; the last heartbeat is the newer of that renewal and the last one
this node answered (kept in memory per executor, the heartbeat's only extra cost).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import quote, unquote

import aetcd
import aetcd.utils
from aetcd import rpc

from tjobs.cancellation import within
from tjobs.cluster.base import RENEW_LATER, RenewNow
from tjobs.cluster.etcd_keepalive import LeaseKeepAlives
from tjobs.errors import StorageUnavailable
from tjobs.pools.model import Executor, ExecutorLease

logger = logging.getLogger(__name__)

ETCD_CALL_TIMEOUT_S = 2.0
MAX_TTL_S = 300.0
LEASE_READS_AT_ONCE = 32  # LeaseTimeToLive calls in flight for one read of the leases
ExecutorKey = tuple[str, str, str]  # (app id, pool, executor id)
T = TypeVar("T")


class EtcdPoolRegistry:
    def __init__(self, client: Callable[[], aetcd.Client], cluster_name: str, now_ms: Callable[[], int]) -> None:
        self._client = client
        self._root = f"/tjobs-pools/{cluster_name}/".encode()
        self._now_ms = now_ms
        self._view: dict[tuple[str, str], tuple[Executor, ...]] = {}
        self._viewed: set[ExecutorKey] = set()  # the executors in _view, to judge one without a scan
        self._leases: dict[ExecutorKey, tuple[int, Executor]] = {}
        self._parsed: dict[bytes, tuple[int, Executor | None]] = {}  # key -> (mod revision, its value read)
        self._keepalives = LeaseKeepAlives(client)
        # lease id -> (when this node last renewed it, monotonic s; the lease's TTL etcd answered, s)
        self._renewed_at: dict[int, tuple[float, int]] = {}
        self._heard: dict[ExecutorKey, float] = {}  # the last heartbeat this node answered, monotonic s
        self._read_at: tuple[int, int] | None = None  # (etcd revision, key count) of the last whole read
        self.synced = 0
        self.read_whole = 0  # syncs that read every key (the others found nothing changed)

    # ---- keys ------------------------------------------------------------------------------------------

    def _app_prefix(self, app_id: str) -> bytes:
        return self._root + quote(app_id, safe="").encode() + b"/"

    def _pool_prefix(self, app_id: str, pool: str) -> bytes:
        return self._app_prefix(app_id) + pool.encode() + b"/"

    def _key(self, app_id: str, pool: str, executor_id: str) -> bytes:
        return self._pool_prefix(app_id, pool) + executor_id.encode()

    def _split(self, key: bytes) -> ExecutorKey | None:
        parts = key[len(self._root) :].decode().split("/")
        if len(parts) != 3:
            return None
        return unquote(parts[0]), parts[1], parts[2]

    # ---- the registry ----------------------------------------------------------------------------------

    async def register(self, app_id: str, pool: str, executor: Executor) -> bool:
        key = self._key(app_id, pool, executor.id)

        async def run() -> bool:
            client = self._client()
            existing = await client.get(key)
            if existing is not None and existing.lease:
                known = _executor_of(existing.value)
                same_ttl = known is not None and known.ttl_s == executor.ttl_s
                if known is not None and same_ttl and await self._renew(int(existing.lease)):
                    kept = _with_registered_at(executor, known.registered_at_ms)
                    if not kept.same_registration(known):
                        await client.put(key, _value(kept), lease=existing.lease)
                    self._remember(app_id, pool, int(existing.lease), kept)
                    return False
            lease = await client.lease(lease_ttl_s(executor.ttl_s))
            registered = _with_registered_at(executor, self._now_ms())
            put = await client.put(key, _value(registered), lease=lease.id, prev_kv=True)
            previous = put.prev_kv  # aetcd answers an empty one when the key did not exist
            existed = previous is not None and int(previous.create_revision) != 0
            if existed and previous is not None and previous.lease and int(previous.lease) != int(lease.id):
                await _quietly(client.revoke_lease(previous.lease))  # nothing else is on it any more
            self._remember(app_id, pool, int(lease.id), registered)
            return not existed

        return await self._call(run, "register an executor")

    def renew_now(self, app_id: str, pool: str, executor_id: str) -> RenewNow:
        """The executor, when this node renewed its lease recently enough that more than half its TTL of
        it is left and it is in the view: the next heartbeat (due within half a TTL) comes while the lease
        lasts, so nothing is sent; else :data:`RENEW_LATER` (:meth:`renew` renews or reads it)."""
        ident = (app_id, pool, executor_id)
        cached = self._leases.get(ident)
        if cached is None:
            return RENEW_LATER
        lease_id, known = cached
        renewed = self._renewed_at.get(lease_id)
        if renewed is None or not self._in_view(ident):
            return RENEW_LATER
        renewed_s, lease_ttl = renewed
        now_s = time.monotonic()
        if now_s - renewed_s >= lease_ttl - known.ttl_s / 2:
            return RENEW_LATER
        try:
            self._client()
        except Exception:  # not started, or stopped: renew answers that the registry did not
            return RENEW_LATER
        self._heard[ident] = now_s
        return known

    async def renew(self, app_id: str, pool: str, executor_id: str) -> Executor | None:
        ident = (app_id, pool, executor_id)
        at_once = self.renew_now(app_id, pool, executor_id)
        if at_once is not RENEW_LATER:
            return at_once

        async def run() -> Executor | None:
            client = self._client()
            cached = self._leases.get(ident)
            if cached is not None:
                lease_id, known = cached
                if await self._renew(lease_id):
                    self._heard[ident] = time.monotonic()
                    return known
                self._leases.pop(ident, None)  # re-registered with another lease, or gone: read it
            found = await client.get(self._key(*ident))
            executor = None if found is None else _executor_of(found.value)
            if found is None or executor is None or not found.lease:
                self._forget(ident)
                return None
            if not await self._renew(int(found.lease)):
                self._forget(ident)
                return None
            self._leases[ident] = (int(found.lease), executor)
            self._heard[ident] = time.monotonic()
            return executor

        return await self._call(run, "renew an executor")

    async def deregister(self, app_id: str, pool: str, executor_id: str) -> bool:
        ident = (app_id, pool, executor_id)

        async def run() -> bool:
            client = self._client()
            key = self._key(*ident)
            found = await client.get(key)
            self._forget(ident)
            if found is None:
                return False
            if found.lease:
                await client.revoke_lease(found.lease)  # deletes the key with it
            await client.delete(key)
            return True

        return await self._call(run, "deregister an executor")

    async def executors(self, app_id: str, pool: str) -> list[Executor]:
        found = await self._call(lambda: self._client().get_prefix(self._pool_prefix(app_id, pool)), "read a pool")
        executors = [e for e in (_executor_of(kv.value) for kv in found) if e is not None]
        return sorted(executors, key=lambda e: e.id)

    async def pools(self, app_id: str) -> dict[str, list[Executor]]:
        found = await self._call(lambda: self._client().get_prefix(self._app_prefix(app_id)), "read the pools")
        pools: dict[str, list[Executor]] = {}
        for kv in found:
            ident = self._split(bytes(kv.key))
            executor = _executor_of(kv.value)
            if ident is not None and executor is not None:
                pools.setdefault(ident[1], []).append(executor)
        return {name: sorted(pools[name], key=lambda e: e.id) for name in sorted(pools)}

    async def leases(self, app_id: str, pool: str | None = None) -> dict[str, list[ExecutorLease]]:
        """Every pool of ``app_id`` (or only ``pool``) with a live executor, each executor with its lease
        read from etcd now (one ``LeaseTimeToLive`` each, a few at a time)."""
        prefix = self._app_prefix(app_id) if pool is None else self._pool_prefix(app_id, pool)
        found = await self._call(lambda: self._client().get_prefix(prefix), "read the pools")
        keyed = []
        for kv in found:
            ident = self._split(bytes(kv.key))
            executor = _executor_of(kv.value)
            if ident is not None and executor is not None and kv.lease:
                keyed.append((ident, executor, int(kv.lease)))
        gate = asyncio.Semaphore(LEASE_READS_AT_ONCE)

        async def left_and_age_s(lease_id: int) -> tuple[int, int]:
            async with gate:
                info = await self._client().get_lease_info(lease_id, keys=False)
            return int(info.TTL), max(int(info.grantedTTL) - int(info.TTL), 0)

        async def read_all() -> list[tuple[int, int]]:
            return list(await asyncio.gather(*(left_and_age_s(lease_id) for _, _, lease_id in keyed)))

        lease_times = await self._call(read_all, "read the executors' leases")
        now_s = time.monotonic()
        pools: dict[str, list[ExecutorLease]] = {}
        for (ident, executor, _), (left_s, renewed_s_ago) in zip(keyed, lease_times, strict=True):
            if left_s <= 0:
                continue  # ended between the two reads
            age_ms = renewed_s_ago * 1000
            heard = self._heard.get(ident)
            if heard is not None:
                age_ms = min(age_ms, round((now_s - heard) * 1000))
            pools.setdefault(ident[1], []).append(ExecutorLease(executor, age_ms, left_s * 1000))
        return {name: sorted(pools[name], key=lambda e: e.executor.id) for name in sorted(pools)}

    async def close(self) -> None:
        await self._keepalives.close()

    # ---- the view ---------------------------------------------------------------------------------------

    def live(self, app_id: str, pool: str) -> tuple[Executor, ...]:
        return self._view.get((app_id, pool), ())

    async def sync(self) -> None:
        """Read every pool once and make that the view (and the lease cache), unless nothing under the
        pools' root changed since the last whole read: no key written after that read's revision (a
        registration, a re-registration) and as many keys (a deregistration, a lease that ran out)."""
        if self._read_at is not None and await self._call(self._unchanged, "check the pools"):
            self.synced += 1
            return
        found = await self._call(lambda: self._client().get_prefix(self._root), "read the pools")
        pools: dict[tuple[str, str], list[Executor]] = {}
        leases: dict[ExecutorKey, tuple[int, Executor]] = {}
        parsed: dict[bytes, tuple[int, Executor | None]] = {}
        for kv in found:
            key, revision = bytes(kv.key), int(kv.mod_revision)
            known = self._parsed.get(key)
            executor = known[1] if known is not None and known[0] == revision else _executor_of(kv.value)
            parsed[key] = (revision, executor)  # values change only on (re-)registration: parse those
            ident = self._split(key)
            if ident is None or executor is None:
                continue
            pools.setdefault((ident[0], ident[1]), []).append(executor)
            leases[ident] = (int(kv.lease), executor)
        self._view = {pool: tuple(sorted(found, key=lambda e: e.id)) for pool, found in pools.items()}
        self._viewed = set(leases)
        self._leases = leases
        if len(self._heard) > len(leases):  # executors gone from every view: forget their heartbeats
            self._heard = {ident: at for ident, at in self._heard.items() if ident in leases}
        self._parsed = parsed
        self._read_at = (int(found.header.revision), len(found.kvs))
        self.synced += 1
        self.read_whole += 1

    async def _unchanged(self) -> bool:
        """Whether the pools' keys are those of the last whole read: one range asking for the keys
        written since (keys only; etcd's count is of every key in the range, filters aside)."""
        assert self._read_at is not None
        revision, count = self._read_at
        client = self._client()
        await client.connect()
        since = rpc.RangeRequest(
            key=self._root,
            range_end=aetcd.utils.prefix_range_end(self._root),
            keys_only=True,
            min_mod_revision=revision + 1,
        )
        found = await client.kvstub.Range(since, metadata=client.metadata)
        return not found.kvs and int(found.count) == count

    def _in_view(self, ident: ExecutorKey) -> bool:
        return ident in self._viewed

    async def _renew(self, lease_id: int) -> bool:
        """Renew the lease on the keepalive stream; whether it was still there."""
        now_s = time.monotonic()
        lease_ttl = await self._keepalives.renew(lease_id)
        if lease_ttl <= 0:
            return False
        if len(self._renewed_at) > 100_000:
            self._renewed_at = {k: v for k, v in self._renewed_at.items() if now_s - v[0] < 2 * MAX_TTL_S}
        self._renewed_at[lease_id] = (now_s, lease_ttl)
        return True

    def _remember(self, app_id: str, pool: str, lease_id: int, executor: Executor) -> None:
        self._leases[(app_id, pool, executor.id)] = (lease_id, executor)
        self._heard[(app_id, pool, executor.id)] = time.monotonic()  # a registration is a heartbeat
        others = [e for e in self._view.get((app_id, pool), ()) if e.id != executor.id]
        self._view[(app_id, pool)] = tuple(sorted([*others, executor], key=lambda e: e.id))
        self._viewed.add((app_id, pool, executor.id))

    def _forget(self, ident: ExecutorKey) -> None:
        self._leases.pop(ident, None)
        self._heard.pop(ident, None)
        self._viewed.discard(ident)
        pool = (ident[0], ident[1])
        remaining = tuple(e for e in self._view.get(pool, ()) if e.id != ident[2])
        if remaining:
            self._view[pool] = remaining
        else:
            self._view.pop(pool, None)

    async def _call(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``call()`` bounded in time; anything but an answer is :class:`StorageUnavailable` (503)."""
        try:
            # not asyncio.timeout: aetcd waits for a concurrent connect within wait_for, which can swallow
            # the deadline (gh-86296); the call is then bounded only by the client's gRPC timeout
            return await within(call(), ETCD_CALL_TIMEOUT_S)
        except StorageUnavailable:
            raise
        except (Exception, TimeoutError) as error:
            logger.warning("could not %s: %s", what, error, extra={"action": "pool_registry_failed"})
            raise StorageUnavailable(f"the executor registry (etcd) did not answer; could not {what}") from None


def lease_ttl_s(ttl_s: int) -> int:
    """The etcd lease of an executor with TTL ``ttl_s``: ``2 x ttl_s - 1`` s, so that a node renews it once
    every few heartbeats (when less than half a TTL of it would be left) and an executor that stops is
    out of every view within ``2 x ttl_s`` (the last renewal is at or before its last heartbeat; etcd
    ends leases within half a second and the views re-read every ``pool_sync_interval_ms``)."""
    return 2 * ttl_s - 1


def _value(executor: Executor) -> bytes:
    return json.dumps(executor.to_json(), sort_keys=True).encode()


def _executor_of(raw: Any) -> Executor | None:
    try:
        return Executor.from_json(json.loads(bytes(raw)))
    except (ValueError, KeyError, TypeError):
        return None


def _with_registered_at(executor: Executor, registered_at_ms: int) -> Executor:
    return replace(executor, registered_at_ms=registered_at_ms)


async def _quietly(call: Awaitable[Any]) -> None:
    try:
        await call
    except Exception as error:
        logger.info("revoking a replaced executor lease failed (%s); it ends by itself", error)
