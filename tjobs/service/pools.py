"""What the pool routes ask for (``/v1/pools``): validate, judge the address, and call the registry.

The registry is the coordinator's (:class:`tjobs.cluster.base.Coordinator`, its pool methods), so
registrations are cluster-wide and a heartbeat writes nothing to the database. Every call names the
calling app: an app registers into, renews in and reads only its own pools, and another app's pool
answers ``404`` exactly like a pool that has no live executor. The body's keys and bounds are
:class:`tjobs.wire.ExecutorRegistration`'s; an executor's address is a callback URL for the URL model
and the target policy (SSRF, with the app's allow-list), judged at registration and again at every
send like any callback.
"""

from __future__ import annotations

import re
from typing import Any

from tjobs.clock import Clock
from tjobs.cluster.base import RENEW_LATER, Coordinator, RenewLater, RenewNow
from tjobs.delivery.ssrf import TargetGuard, allow_list_of_app
from tjobs.errors import InvalidInput, NotFound
from tjobs.model import App
from tjobs.pools.model import Executor, executor_id_for
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


class PoolService:
    def __init__(self, registry: Coordinator, guard: TargetGuard, limits: LimitSettings, clock: Clock) -> None:
        self._registry = registry
        self._guard = guard
        self._limits = limits
        self._clock = clock

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


def _integer(body: dict[str, Any], field: str, default: int, low: int, high: int) -> int:
    value = body.get(field, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(field, f"must be an integer {low}..{high}")
    return value
