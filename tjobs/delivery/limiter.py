"""Per-app limits on callbacks: a token bucket (rate) and a concurrency cap, under a global in-flight cap.

``async with limiter.slot(app_id, rate_per_s, concurrency):`` waits, in this order, for

1. one of the app's ``concurrency`` slots (a FIFO gate of its own per app),
2. the app's rate: a :class:`tjobs.delivery.token_bucket.TokenBucket` reservation per caller (so waiters are
   served in arrival order; the bucket holds ``burst_s`` seconds of tokens),
3. one of the node's ``global_max_in_flight`` slots,

and releases 3 then 1 on exit. Each app waits in its own queues, and a caller only touches the global
gate once its app's limits let it through, so an app that is throttled or whose receiver is slow
holds at most its own ``concurrency`` of the global slots and never delays another app's callbacks.
Waiting is not dropping: a throttled callback is sent later, never skipped.

A caller the app's own limits made wait is reported once to the observer
(:meth:`tjobs.observability.observer.FireObserver.throttled` with ``app_id`` and a reason):
``"rate"`` when the token bucket delayed it (whether or not it also queued for a concurrency slot:
a rate-limited app's callers queue behind those sleeping on the bucket), else ``"concurrency"``
when it queued for one of the app's slots, or says it already queued for one outside (``slot(…,
queued=True)``: the deliverer keeps an app's waiting callbacks in its own per-app queue, drained by
at most ``concurrency`` workers, so they wait there rather than at the gate). Waiting for the node's
global cap is not the app's throttling and is not reported. Callers that pass straight through pay
nothing for the observer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType

from tjobs.delivery.token_bucket import TokenBucket
from tjobs.observability.observer import NO_OBSERVER, FireObserver


class Gate:
    """A FIFO counting gate whose limit may change while it is held (an app's settings can change)."""

    __slots__ = ("_waiters", "active", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self) -> bool:
        """Take a slot if one is free and nobody queues for it (what :meth:`acquire` does first,
        without a coroutine: the free path of every callback)."""
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return True
        return False

    async def acquire(self) -> bool:
        """Take a slot; ``True`` when the caller had to queue for it."""
        if self.try_acquire():
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over just as we were cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise
        return True

    def release(self) -> None:
        self.active -= 1
        self._admit()

    def set_limit(self, limit: int) -> None:
        self.limit = limit
        self._admit()

    def _admit(self) -> None:
        while self._waiters and self.active < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.active += 1
                waiter.set_result(None)


class _AppState:
    __slots__ = ("bucket", "gate")

    def __init__(self, rate_per_s: float, concurrency: int, burst_s: float) -> None:
        self.gate = Gate(concurrency)
        self.bucket = TokenBucket(rate_per_s, burst_s)


class AppLimiter:
    """Rate and concurrency limits per app, and a global in-flight cap, for one node."""

    def __init__(
        self,
        global_max_in_flight: int,
        burst_s: float = 1.0,
        monotonic: Callable[[], float] | None = None,
        observer: FireObserver = NO_OBSERVER,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``observer`` is told of each caller the app's limits delayed (module doc).

        ``monotonic`` (seconds; the event loop's clock by default) and ``sleep`` (the wait for a rate
        reservation) are the limiter's time: tests hand in a manual clock and its sleep."""
        if global_max_in_flight < 1:
            raise ValueError("global_max_in_flight must be at least 1")
        self._global = Gate(global_max_in_flight)
        self._burst_s = burst_s
        self._monotonic = monotonic
        self._observer = observer
        self._sleep = sleep
        self._apps: dict[str, _AppState] = {}

    def slot(self, app_id: str, rate_per_s: float, concurrency: int, *, queued: bool = False) -> _Slot:
        """An async context manager holding one callback slot of ``app_id`` (see the module doc);
        ``queued``: the caller already waited for one of the app's ``concurrency`` slots elsewhere."""
        state = self._apps.get(app_id)
        if state is None:
            state = self._apps[app_id] = _AppState(rate_per_s, max(concurrency, 1), self._burst_s)
        else:
            if state.bucket.rate_per_s != rate_per_s:
                state.bucket.set_rate(rate_per_s, self._burst_s)
            if state.gate.limit != concurrency and concurrency >= 1:
                state.gate.set_limit(concurrency)
        return _Slot(self, app_id, state, queued)

    def in_flight(self, app_id: str | None = None) -> int:
        """Slots held now: for one app, or globally."""
        if app_id is None:
            return self._global.active
        state = self._apps.get(app_id)
        return 0 if state is None else state.gate.active

    def waiting(self, app_id: str) -> int:
        """Callers of ``app_id`` waiting for one of its concurrency slots."""
        state = self._apps.get(app_id)
        return 0 if state is None else state.gate.waiting

    def now_s(self) -> float:
        """The limiter's time: ``monotonic``, or the event loop's clock."""
        return self._monotonic() if self._monotonic is not None else asyncio.get_running_loop().time()


class _Slot:
    __slots__ = ("_app_id", "_limiter", "_queued", "_state")

    def __init__(self, limiter: AppLimiter, app_id: str, state: _AppState, queued: bool) -> None:
        self._limiter = limiter
        self._app_id = app_id
        self._state = state
        self._queued = queued

    async def __aenter__(self) -> None:
        state = self._state
        limiter = self._limiter
        gate = state.gate
        queued = (not gate.try_acquire() and await gate.acquire()) or self._queued
        try:
            delay_s = state.bucket.reserve(limiter.now_s())
            if queued or delay_s > 0.0:
                limiter._observer.throttled(self._app_id, "rate" if delay_s > 0.0 else "concurrency")
            if delay_s > 0.0:
                await limiter._sleep(delay_s)
            if not limiter._global.try_acquire():
                await limiter._global.acquire()
        except BaseException:
            state.gate.release()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._limiter._global.release()
        self._state.gate.release()
