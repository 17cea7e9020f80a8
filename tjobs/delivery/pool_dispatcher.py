"""One attempt of a flow whose callback names a pool: which executors get it, sent, and answered.

A pool is one destination kind of a flow (beside inline URLs and ``target:<name>``, see
:mod:`tjobs.delivery.message`). The flow starts with one destination, ``pool:<name>``; its first
attempt expands it by the route's mode, and each destination is then tracked like a multicast URL (a
retry goes only to those not delivered yet):

=================  ====================================  ==============================================
mode               destinations                          each attempt
=================  ====================================  ==============================================
``one``            ``pool:<name>``                        one executor by the strategy, never one this
                                                         flow tried already while another is live
                                                         (failover, same flow id; a re-driven flow's
                                                         tried ones are read from its route log, so
                                                         the retry of a run that timed out or failed
                                                         goes to another executor if one is live)
``one_per_zone``   ``pool:<name>@<zone>`` per zone with   one executor of that zone, as ``one``; a zone
                   a live executor at the first attempt   left without executors is dropped
``all``            ``pool:<name>/<executor id>`` per      that executor; one that left the pool is
                   executor live at the first attempt     dropped from the flow, not retried forever
``sharded``        ``pool:<name>#<item>`` for items       the item's holder in the pool's even, stable
                   ``0..shard_total-1``                   assignment (:mod:`tjobs.pools.sharding`); an
                                                         item whose holder is gone or whose circuit is
                                                         open goes to another live executor
=================  ====================================  ==============================================

Executors whose circuit is open (:mod:`tjobs.pools.breaker`: they answered ``503`` or refused the
connection) are passed over while another one can take the destination. A destination with no
executor to send to now waits: it is not sent, and when no destination of the attempt could be sent
the deliverer waits for executors per the flow's retry policy without spending an attempt (dead only
after ``max_age_s``). Each send is recorded in the flow's route log (attempt, destination, executor).

The request to an executor is the flow's signed request addressed to ``route.url_of(address)`` and
judged by the node's target policy like any callback URL (SSRF, with the app's allow-list); it adds
``tjobs-executor-id`` and, for ``sharded``, ``tjobs-shard-index``, ``tjobs-shard-total`` (and
``tjobs-shard-param`` when the route gives item parameters), which the JSON envelope also carries,
signed, as ``"shard": {"index", "total", "param"}``. Executors deduplicate on ``webhook-id`` plus,
for ``sharded``, ``tjobs-shard-index`` (one executor may hold several items of one fire).

State kept per node: round-robin positions, callbacks in flight per executor, circuit breakers and
the last shard assignment per pool and item count (so a node keeps the split stable across fires;
another node computes the same split from scratch when it takes the task over), and the pools a flow
found with no live executor at all (:meth:`PoolDispatcher.starved`: when last, how many times), which
the node publishes with its figures for the empty-pool warning.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from tjobs.delivery.message import CallbackMessage
from tjobs.delivery.transport import AttemptResult, CallbackRequest, Outcome, Transport
from tjobs.pools.breaker import CircuitBreakers
from tjobs.pools.model import Executor
from tjobs.pools.selection import RoundRobin, least_in_flight, rendezvous_order, with_room
from tjobs.pools.sharding import assign_items
from tjobs.specs.pool import HashOn, Mode, PoolRoute, Strategy, pool_key

MAX_ROUTE_LOG = 50  # sends kept in a flow's route log (the newest)
MAX_STARVED_POOLS = 1000  # pools remembered as found without executors (the oldest forgotten first)
REFUSED_ERRORS = ("ConnectionRefusedError", "Connection refused")


class LiveExecutors(Protocol):
    """Where the dispatcher reads a pool's live executors (the coordinator's view)."""

    def live_executors(self, app_id: str, pool: str) -> tuple[Executor, ...]: ...


@dataclass(slots=True)
class PoolFlow:
    """What one flow's delivery remembers about its pool between attempts (kept by the deliverer)."""

    app_id: str
    route: PoolRoute
    hash_key: str  # consistent hashing: the task id or the task's key
    expanded: bool = False
    tried: dict[str, list[str]] = field(default_factory=dict)  # destination -> executor ids, in order (routes')
    delivered: int = 0  # destinations delivered so far
    waits: int = 0  # attempts that found no executor to send to
    routes: list[tuple[int, str, str]] = field(default_factory=list)  # (attempt, destination, executor id)


@dataclass(frozen=True, slots=True)
class PoolAttempt:
    """What one attempt did: the flow's destinations now (expanded, dropped ones gone), a result per
    destination sent or waiting, and why nothing could be sent (``None`` if something was)."""

    destinations: list[str]
    results: list[AttemptResult]
    dropped: list[str]
    nothing_sent: str | None


@dataclass(frozen=True, slots=True)
class _Send:
    key: str
    executor: Executor
    shard_index: int | None = None


class PoolDispatcher:
    def __init__(self, registry: LiveExecutors, transport: Transport, breakers: CircuitBreakers | None = None) -> None:
        self._registry = registry
        self._transport = transport
        self.breakers = breakers or CircuitBreakers()
        self._round_robins: dict[tuple[str, str, str], RoundRobin] = {}
        self._in_flight: dict[tuple[str, str], dict[str, int]] = {}
        self._assignments: dict[tuple[str, str, int], dict[int, str]] = {}
        self._ties = itertools.count()
        self.waits = 0  # attempts that found no executor (all flows), for metrics and tests
        # (app id, pool) -> (when an attempt last found no live executor there, epoch ms; how many did)
        self._starved: dict[tuple[str, str], tuple[int, int]] = {}

    # ---- one attempt --------------------------------------------------------------------------------

    async def attempt(
        self,
        flow: PoolFlow,
        destinations: Sequence[str],
        message: CallbackMessage,
        attempt: int,
        headers: dict[str, str],
        body: bytes | None,
        now_ms: int,
    ) -> PoolAttempt:
        route = flow.route
        live = self._registry.live_executors(flow.app_id, route.pool)
        keys = list(destinations)
        if not live:
            self._starve(flow.app_id, route.pool, now_ms)
        if not flow.expanded:
            if not live:
                return self._nothing(flow, keys, f"no live executor in pool {route.pool!r}")
            keys = self._expand(flow, live)
            flow.expanded = True
        sends, waiting, dropped = self._plan(flow, keys, live, now_ms)
        keys = [key for key in keys if key not in dropped]
        if not sends:
            if not keys:
                return PoolAttempt(keys, [], dropped, None)
            return self._nothing(flow, keys, waiting_reason(route.pool, live), dropped)
        requests = [self._request(flow, send, message, attempt, headers, body, now_ms) for send in sends]
        for send in sends:
            self._count(flow.app_id, route.pool, send.executor.id, +1)
            flow.tried.setdefault(send.key, []).append(send.executor.id)
            flow.routes.append((attempt, send.key, send.executor.id))
        del flow.routes[:-MAX_ROUTE_LOG]
        try:
            if len(requests) == 1:
                answered = [await self._transport.send(requests[0])]
            else:
                answered = list(await asyncio.gather(*(self._transport.send(r) for r in requests)))
        finally:
            for send in sends:
                self._count(flow.app_id, route.pool, send.executor.id, -1)
        results: list[AttemptResult] = []
        for send, result in zip(sends, answered, strict=True):
            self._judge(flow.app_id, route.pool, send.executor.id, result, now_ms)
            if result.outcome is Outcome.DELIVERED:
                flow.delivered += 1
            error = None if result.error is None else f"executor {send.executor.id}: {result.error}"
            results.append(replace(result, url=send.key, error=error))
        results.extend(_waiting(message.flow_id, key, attempt, now_ms, waiting[key]) for key in waiting)
        return PoolAttempt(keys, results, dropped, None)

    def _starve(self, app_id: str, pool: str, now_ms: int) -> None:
        key = (app_id, pool)
        _, times = self._starved.pop(key, (0, 0))
        if len(self._starved) >= MAX_STARVED_POOLS:
            del self._starved[next(iter(self._starved))]
        self._starved[key] = (now_ms, times + 1)  # newest last

    def starved(self, since_ms: int) -> list[tuple[str, str, int, int]]:
        """The pools an attempt found with no live executor at or after ``since_ms``: ``(app id, pool,
        last time in epoch ms, attempts since this node started)``, oldest first."""
        return [(app, pool, at, times) for (app, pool), (at, times) in self._starved.items() if at >= since_ms]

    def _nothing(self, flow: PoolFlow, keys: list[str], why: str, dropped: list[str] | None = None) -> PoolAttempt:
        flow.waits += 1
        self.waits += 1
        return PoolAttempt(keys, [], dropped or [], why)

    # ---- planning -----------------------------------------------------------------------------------

    def _expand(self, flow: PoolFlow, live: Sequence[Executor]) -> list[str]:
        route = flow.route
        base = pool_key(route.pool)
        if route.mode is Mode.ONE:
            return [base]
        if route.mode is Mode.ONE_PER_ZONE:
            return [f"{base}@{zone}" for zone in sorted({e.zone for e in live})]
        if route.mode is Mode.ALL:
            return [f"{base}/{e.id}" for e in live]
        assert route.shard_total is not None
        return [f"{base}#{item}" for item in range(route.shard_total)]

    def _plan(
        self, flow: PoolFlow, keys: list[str], live: Sequence[Executor], now_ms: int
    ) -> tuple[list[_Send], dict[str, str], list[str]]:
        """The sends of this attempt, the destinations waiting (with why) and those dropped for good."""
        route = flow.route
        base = pool_key(route.pool)
        by_id = {e.id: e for e in live}
        sends: list[_Send] = []
        waiting: dict[str, str] = {}
        dropped: list[str] = []
        assignment: dict[int, str] = {}
        if route.mode is Mode.SHARDED:
            assert route.shard_total is not None
            assignment = self._assignment(flow.app_id, route.pool, route.shard_total, live)
        for key in keys:
            if route.mode is Mode.ONE:
                chosen = self._one(flow, key, list(live), "", now_ms)
            elif route.mode is Mode.ONE_PER_ZONE:
                zone = key[len(base) + 1 :]
                in_zone = [e for e in live if e.zone == zone]
                if not in_zone:
                    dropped.append(key)
                    continue
                chosen = self._one(flow, key, in_zone, zone, now_ms)
            elif route.mode is Mode.ALL:
                found = by_id.get(key[len(base) + 1 :])
                if found is None:
                    dropped.append(key)
                    continue
                chosen = None if self._open(flow, found, now_ms) else found
            else:
                item = int(key[len(base) + 1 :])
                holder = by_id.get(assignment.get(item, ""))
                if holder is not None and not self._open(flow, holder, now_ms):
                    chosen = holder
                else:  # its holder is gone or down: another live executor takes it for this flow
                    usable = [e for e in live if not self._open(flow, e, now_ms)]
                    order = rendezvous_order(usable, f"{flow.hash_key}#{item}")
                    chosen = order[0] if order else None
                if chosen is not None:
                    sends.append(_Send(key, chosen, item))
                    continue
            if chosen is None:
                waiting[key] = waiting_reason(route.pool, live)
            else:
                sends.append(_Send(key, chosen))
        return sends, waiting, dropped

    def _one(self, flow: PoolFlow, key: str, candidates: list[Executor], zone: str, now_ms: int) -> Executor | None:
        """One executor for ``key``: not tried by this flow yet and not down, if there is one."""
        if not candidates:
            return None
        route = flow.route
        usable = [e for e in candidates if not self._open(flow, e, now_ms)] or candidates
        tried = flow.tried.get(key, [])
        untried = [e for e in usable if e.id not in tried]
        if not untried:  # every one tried: start over, the last one last
            untried = [e for e in usable if not tried or e.id != tried[-1]] or usable
        if route.strategy is Strategy.CONSISTENT_HASH:
            return rendezvous_order(untried, flow.hash_key)[0]
        in_flight = self._in_flight.get((flow.app_id, route.pool), {})
        if route.strategy is Strategy.LEAST_IN_FLIGHT:
            return least_in_flight(untried, in_flight, next(self._ties))
        picker = self._round_robins.setdefault((flow.app_id, route.pool, zone), RoundRobin())
        return picker.pick(with_room(untried, in_flight))

    def _assignment(self, app_id: str, pool: str, total: int, live: Sequence[Executor]) -> dict[int, str]:
        key = (app_id, pool, total)
        assignment = assign_items(self._assignments.get(key, {}), [e.id for e in live], total)
        if len(self._assignments) > 10_000:
            self._assignments.clear()
        self._assignments[key] = assignment
        return assignment

    def _open(self, flow: PoolFlow, executor: Executor, now_ms: int) -> bool:
        return self.breakers.is_open((flow.app_id, flow.route.pool, executor.id), now_ms)

    # ---- sending ------------------------------------------------------------------------------------

    def _request(
        self,
        flow: PoolFlow,
        send: _Send,
        message: CallbackMessage,
        attempt: int,
        headers: dict[str, str],
        body: bytes | None,
        now_ms: int,
    ) -> CallbackRequest:
        route = flow.route
        if send.shard_index is not None:
            assert route.shard_total is not None
            shard: dict[str, object] = {"index": send.shard_index, "total": route.shard_total}
            if route.shard_params:
                shard["param"] = route.shard_params[send.shard_index]
            headers, body = message.signed(attempt, now_ms, {"shard": shard})
            headers["tjobs-shard-index"] = str(send.shard_index)
            headers["tjobs-shard-total"] = str(route.shard_total)
            if route.shard_params:
                headers["tjobs-shard-param"] = route.shard_params[send.shard_index]
        else:
            headers = dict(headers)
        headers["tjobs-executor-id"] = send.executor.id
        return message.request(route.url_of(send.executor.address), attempt, headers, body)

    def _count(self, app_id: str, pool: str, executor_id: str, delta: int) -> None:
        counts = self._in_flight.setdefault((app_id, pool), {})
        value = counts.get(executor_id, 0) + delta
        if value > 0:
            counts[executor_id] = value
        else:
            counts.pop(executor_id, None)
            if not counts:
                del self._in_flight[(app_id, pool)]

    def _judge(self, app_id: str, pool: str, executor_id: str, result: AttemptResult, now_ms: int) -> None:
        key = (app_id, pool, executor_id)
        if result.outcome is Outcome.DELIVERED:
            self.breakers.succeeded(key)
        elif result.status == 503 or (result.status is None and _refused(result.error)):
            self.breakers.failed(key, now_ms)

    def in_flight(self, app_id: str, pool: str) -> dict[str, int]:
        return dict(self._in_flight.get((app_id, pool), {}))

    def in_flight_all(self) -> dict[tuple[str, str], dict[str, int]]:
        """Callbacks in flight from this node per (app id, pool) and executor (none: not listed)."""
        return {pool: dict(counts) for pool, counts in self._in_flight.items() if counts}


def hash_key_of(route: PoolRoute, task_id: int, task_key: str | None) -> str:
    return task_key if route.hash_on is HashOn.KEY and task_key else str(task_id)


def waiting_reason(pool: str, live: Sequence[Executor]) -> str:
    if not live:
        return f"no live executor in pool {pool!r}"
    return f"no executor of pool {pool!r} can take it now (circuits open)"


def _refused(error: str | None) -> bool:
    return error is not None and any(marker in error for marker in REFUSED_ERRORS)


def _waiting(flow_id: str, key: str, attempt: int, now_ms: int, why: str) -> AttemptResult:
    """The result of a destination not sent this attempt (no executor for it now): retried later."""
    return AttemptResult(flow_id, key, attempt, Outcome.RETRYABLE, None, why, None, now_ms, 0.0)
