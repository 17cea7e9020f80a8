"""The executor pools' registry of the embedded coordinator: in process, leases on a monotonic clock
(the contract: :class:`tjobs.cluster.base.Coordinator`, its pool methods)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tjobs.pools.model import Executor, ExecutorLease

PoolKey = tuple[str, str]  # (app id, pool)


@dataclass(slots=True)
class _Lease:
    executor: Executor
    expires_at_s: float
    renewed_at_s: float  # its last heartbeat (or registration): every one renews the lease here


class LocalPoolRegistry:
    def __init__(self, monotonic_s: Callable[[], float] = time.monotonic) -> None:
        self._now_s = monotonic_s
        self._pools: dict[PoolKey, dict[str, _Lease]] = {}
        # per pool: its live executors by id, and until when that holds (the earliest expiry then)
        self._views: dict[PoolKey, tuple[tuple[Executor, ...], float]] = {}

    def register(self, app_id: str, pool: str, executor: Executor) -> bool:
        leases = self._live((app_id, pool), create=True)
        created = executor.id not in leases
        now_s = self._now_s()
        leases[executor.id] = _Lease(executor, now_s + executor.ttl_s, now_s)
        self._views.pop((app_id, pool), None)
        return created

    def renew(self, app_id: str, pool: str, executor_id: str) -> Executor | None:
        """Only this executor's lease is judged (a heartbeat does not sweep its pool; the reads do)."""
        leases = self._pools.get((app_id, pool))
        lease = None if leases is None else leases.get(executor_id)
        if lease is None:
            return None
        now_s = self._now_s()
        if lease.expires_at_s <= now_s:
            self._live((app_id, pool))
            return None
        lease.expires_at_s = now_s + lease.executor.ttl_s
        lease.renewed_at_s = now_s
        return lease.executor

    def deregister(self, app_id: str, pool: str, executor_id: str) -> bool:
        self._views.pop((app_id, pool), None)
        return self._live((app_id, pool)).pop(executor_id, None) is not None

    def live(self, app_id: str, pool: str) -> tuple[Executor, ...]:
        """:meth:`executors` as a tuple, built again only once the pool changed or a lease may have ended."""
        key = (app_id, pool)
        view = self._views.get(key)
        if view is not None and self._now_s() < view[1]:
            return view[0]
        leases = self._live(key)
        executors = tuple(leases[executor_id].executor for executor_id in sorted(leases))
        until_s = min((lease.expires_at_s for lease in leases.values()), default=float("inf"))
        if len(self._views) > 10_000:
            self._views.clear()
        self._views[key] = (executors, until_s)
        return executors

    def executors(self, app_id: str, pool: str) -> list[Executor]:
        leases = self._live((app_id, pool))
        return [leases[executor_id].executor for executor_id in sorted(leases)]

    def leases(self, app_id: str, pool: str | None = None) -> dict[str, list[ExecutorLease]]:
        """Every pool of ``app_id`` (or only ``pool``) with a live executor: each executor with the time since
        its last heartbeat and until its lease ends (every heartbeat renews it here: both are exact)."""
        names = [pool] if pool is not None else sorted(name for owner, name in list(self._pools) if owner == app_id)
        now_s = self._now_s()
        found: dict[str, list[ExecutorLease]] = {}
        for name in names:
            leases = self._live((app_id, name))
            if leases:
                found[name] = [
                    ExecutorLease(
                        lease.executor,
                        round((now_s - lease.renewed_at_s) * 1000),
                        round((lease.expires_at_s - now_s) * 1000),
                    )
                    for _, lease in sorted(leases.items())
                ]
        return found

    def pools(self, app_id: str) -> dict[str, list[Executor]]:
        names = sorted(pool for owner, pool in list(self._pools) if owner == app_id)
        found = {name: self.executors(app_id, name) for name in names}
        return {name: executors for name, executors in found.items() if executors}

    def _live(self, key: PoolKey, *, create: bool = False) -> dict[str, _Lease]:
        """The pool's unexpired leases (expired ones dropped now); a pool left empty is forgotten."""
        leases = self._pools.get(key)
        if leases is None:
            if not create:
                return {}
            leases = self._pools[key] = {}
        now_s = self._now_s()
        for executor_id in [i for i, lease in leases.items() if lease.expires_at_s <= now_s]:
            del leases[executor_id]
        if not leases and not create:
            del self._pools[key]
        return leases
