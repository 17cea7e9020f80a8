"""What the pool routes ask for (``/v1/pools``): validate, judge the address, and call the registry.

The registry is the coordinator's (:class:`tjobs.cluster.base.Coordinator`, its pool methods), so
registrations are cluster-wide and a heartbeat writes nothing to the database. Every call names the
calling app: an app registers into, renews in and reads only its own pools, and another app's pool
answers ``404`` exactly like a pool that has no live executor. The body's keys and bounds are
:class:`tjobs.wire.ExecutorRegistration`'s; an executor's address is a callback URL for the URL model
and the target policy (SSRF, with the app's allow-list), judged at registration and again at every
send like any callback.

What an operator reads of a pool is one source for the API (``GET /v1/pools/{pool}``) and the console:
:meth:`PoolService.pool_state` and :meth:`PoolService.app_state` give each live executor with its last
heartbeat and lease expiry (:meth:`tjobs.cluster.base.Coordinator.pool_leases`, turned into instants
with the node's clock) and the callbacks every node has in flight to it (summed from the nodes'
published figures, :mod:`tjobs.service.node_figures`); :meth:`PoolService.empty_pools` the pools where a
flow found no live executor in the last 15 minutes and which have none now (the empty-pool warning).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tjobs.clock import Clock
from tjobs.cluster.base import RENEW_LATER, Coordinator, RenewLater, RenewNow
from tjobs.delivery.ssrf import TargetGuard, allow_list_of_app
from tjobs.errors import InvalidInput, NotFound
from tjobs.model import App
from tjobs.pools.model import Executor, ExecutorLease, executor_id_for
from tjobs.service.node_figures import NodeFigures, pool_in_flight, starved_pools
from tjobs.service.validation import check_url
from tjobs.settings import LimitSettings
from tjobs.specs.pool import valid_pool_name
from tjobs.wire import (
    EXECUTOR_DEFAULT_TTL_S,
    EXECUTOR_ID_PATTERN,
    EXECUTOR_MAX_CAPACITY,
    EXECUTOR_MAX_TTL_S,
    EXECUTOR_MAX_WEIGHT,
    EXECUTOR_MIN_TTL_S,
    ZONE_PATTERN,
    ExecutorRegistration,
)

REGISTRATION_KEYS = frozenset(ExecutorRegistration.model_fields)
_EXECUTOR_ID = re.compile(EXECUTOR_ID_PATTERN)
_ZONE = re.compile(ZONE_PATTERN)


@dataclass(frozen=True, slots=True)
class ExecutorState:
    """A live executor as an operator reads it: instants in epoch ms (the node's clock)."""

    executor: Executor
    last_heartbeat_ms: int
    lease_expires_at_ms: int
    in_flight: int  # callbacks in flight to it from every node, as each last published


@dataclass(frozen=True, slots=True)
class EmptyPool:
    """A pool with no live executor now where a flow found none (at ``last_ms``, ``attempts`` times)."""

    app_id: str
    pool: str
    last_ms: int
    attempts: int
    nodes: list[str]


@dataclass(frozen=True, slots=True)
class PoolsState:
    """An app's pools: the live ones with their executors, the empty ones flows are waiting for, how old
    the oldest node's published in-flight counts are (``None``: no node published), and why some nodes'
    could not be read (``None``: all were)."""

    pools: dict[str, list[ExecutorState]]
    empty: list[EmptyPool]
    figures_at_ms: int | None
    figures_missing: str | None = None
    nodes: list[str] = field(default_factory=list)


class PoolService:
    def __init__(
        self,
        registry: Coordinator,
        guard: TargetGuard,
        limits: LimitSettings,
        clock: Clock,
        figures: NodeFigures | None = None,
    ) -> None:
        self._registry = registry
        self._guard = guard
        self._limits = limits
        self._clock = clock
        self._figures = figures  # the nodes' published figures (in flight, empty pools); None: none known

    async def register(self, app: App, pool: str, body: Any) -> tuple[Executor, bool]:
        """Register (or re-register) an executor; whether it is new. 422 naming the field otherwise."""
        if not valid_pool_name(pool):
            raise InvalidInput("pool", "must be a pool name: lower-case letters, digits, '_', '.', '-' (1..63)")
        executor = self.parse_registration(body)
        await self._guard.check_registration([executor.address], allow_list_of_app(app.settings), field="address")
        created = await self._registry.register_executor(app.id, pool, executor)
        return executor, created

    def parse_registration(self, body: Any) -> Executor:
        if not isinstance(body, dict):
            raise InvalidInput("body", "must be a JSON object")
        unknown = sorted(set(body) - REGISTRATION_KEYS)
        if unknown:
            raise InvalidInput(unknown[0], "unknown field", "unknown_field")
        address = check_url(body.get("address"), "address", self._limits)
        if "?" in address or "#" in address:  # a route's path is appended: it would land in the query
            raise InvalidInput("address", "must be a base URL without a query or fragment (a route's path is appended)")
        executor_id = body.get("id")
        if executor_id is None:
            executor_id = executor_id_for(address)
        elif not isinstance(executor_id, str) or not _EXECUTOR_ID.fullmatch(executor_id):
            raise InvalidInput(
                "id", "must be 1..128 letters, digits, '_', '.', ':', '-' (starting with one of the first two)"
            )
        zone = body.get("zone", "")
        if not isinstance(zone, str) or not _ZONE.fullmatch(zone):
            raise InvalidInput("zone", "must be at most 64 letters, digits, '_', '.', ':', '-'")
        weight = _integer(body, "weight", 1, 1, EXECUTOR_MAX_WEIGHT)
        capacity = None if body.get("capacity") is None else _integer(body, "capacity", 1, 1, EXECUTOR_MAX_CAPACITY)
        ttl_s = _integer(body, "ttl_s", EXECUTOR_DEFAULT_TTL_S, EXECUTOR_MIN_TTL_S, EXECUTOR_MAX_TTL_S)
        return Executor(executor_id, address, zone, weight, capacity, ttl_s, self._clock.now_ms())

    async def renew(self, app: App, pool: str, executor_id: str) -> Executor:
        """A heartbeat: restart the executor's lease; 404 when it is not registered (register again)."""
        found = None
        if valid_pool_name(pool) and _EXECUTOR_ID.fullmatch(executor_id):
            found = await self._registry.renew_executor(app.id, pool, executor_id)
        if found is None:
            raise NotFound("executor", f"{executor_id} in pool {pool}")
        return found

    def renew_now(self, app: App, pool: str, executor_id: str) -> Executor | RenewLater:
        """:meth:`renew` answered at once when the registry can (no I/O): the executor, or
        :class:`NotFound` raised as :meth:`renew` raises it; :data:`RENEW_LATER` when only :meth:`renew`
        can tell (``None`` is never returned)."""
        found: RenewNow = None
        if valid_pool_name(pool) and _EXECUTOR_ID.fullmatch(executor_id):
            found = self._registry.renew_executor_now(app.id, pool, executor_id)
            if found is RENEW_LATER:
                return found
        if found is None:
            raise NotFound("executor", f"{executor_id} in pool {pool}")
        return found

    async def deregister(self, app: App, pool: str, executor_id: str) -> None:
        removed = False
        if valid_pool_name(pool) and _EXECUTOR_ID.fullmatch(executor_id):
            removed = await self._registry.deregister_executor(app.id, pool, executor_id)
        if not removed:
            raise NotFound("executor", f"{executor_id} in pool {pool}")

    async def pool(self, app: App, pool: str) -> list[Executor]:
        """The pool's live executors; 404 for a pool with none (or another app's)."""
        executors = await self._registry.pool_executors(app.id, pool) if valid_pool_name(pool) else []
        if not executors:
            raise NotFound("pool", pool)
        return executors

    async def pools(self, app: App) -> dict[str, list[Executor]]:
        return await self._registry.app_pools(app.id)

    async def pool_state(self, app: App, pool: str) -> list[ExecutorState]:
        """:meth:`pool` with each executor's last heartbeat, lease expiry and callbacks in flight."""
        leases = await self._registry.pool_leases(app.id, pool) if valid_pool_name(pool) else {}
        if not leases.get(pool):
            raise NotFound("pool", pool)
        records, _ = await self._every_node()
        return self._states(pool, leases[pool], pool_in_flight(records, app.id))

    async def app_state(self, app: App) -> PoolsState:
        """Every pool of the app with its live executors, and the empty pools flows wait for."""
        leases = await self._registry.pool_leases(app.id)
        records, missing = await self._every_node()
        in_flight = pool_in_flight(records, app.id)
        pools = {name: self._states(name, found, in_flight) for name, found in leases.items()}
        empty = await self._empty(records, {app.id}, live=set(pools))
        published = [int(record["published_at_ms"]) for record in records.values() if "published_at_ms" in record]
        return PoolsState(pools, empty, min(published, default=None), missing, sorted(records))

    async def empty_pools(self, app_ids: set[str] | None) -> list[EmptyPool]:
        """The pools of ``app_ids`` (``None``: of every app) where a flow found no live executor in the last
        15 minutes (on any node, as published) that have none now, newest first."""
        records, _ = await self._every_node()
        return await self._empty(records, app_ids)

    async def _empty(
        self, records: dict[str, Any], app_ids: set[str] | None, live: set[str] | None = None
    ) -> list[EmptyPool]:
        found = []
        for (app_id, pool), seen in starved_pools(records, app_ids).items():
            has_live = pool in live if live is not None else bool(await self._registry.pool_executors(app_id, pool))
            if not has_live:
                found.append(EmptyPool(app_id, pool, seen["last_ms"], seen["attempts"], sorted(seen["nodes"])))
        return sorted(found, key=lambda empty: (-empty.last_ms, empty.app_id, empty.pool))

    async def _every_node(self) -> tuple[dict[str, Any], str | None]:
        if self._figures is None:
            return {}, None
        return await self._figures.every_node()

    def _states(
        self, pool: str, leases: list[ExecutorLease], in_flight: dict[tuple[str, str], int]
    ) -> list[ExecutorState]:
        now_ms = self._clock.now_ms()
        return [
            ExecutorState(
                lease.executor,
                now_ms - lease.heartbeat_age_ms,
                now_ms + lease.lease_left_ms,
                in_flight.get((pool, lease.executor.id), 0),
            )
            for lease in leases
        ]


def _integer(body: dict[str, Any], field: str, default: int, low: int, high: int) -> int:
    value = body.get(field, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(field, f"must be an integer {low}..{high}")
    return value
