"""The apps' queues of deliveries and the workers that drain them (:class:`Lanes`).

Each app has its own queue (:class:`Lane`), drained by up to the app's ``max_concurrency`` workers, each attempt
holding an :class:`~tjobs.delivery.limiter.AppLimiter` slot, so a slow or throttled app only ever waits on itself.
A worker ends when its queue is empty or the deliverer stops; a delivery left in a queue then was never sent from here
(:mod:`tjobs.delivery.hand_back`), nor one whose wait for its app's limits the stop's drain cut short: it goes back to
the head of its queue. A lane measures how fast its workers take from it, so a queued delivery's wait can be
told (:meth:`Lanes.wait_ms`: how long its node's compensator leases it, :mod:`tjobs.firing.compensator`). Waits and
paces are timed on the limiter's monotonic clock: a step of the node's wall clock (NTP, ``date -s``) is no wait.
A lane keeps in memory what its app drains in :data:`KEEP_AHEAD_MS` (at least ``keep_min``); a first attempt past
that waits in the store instead (:mod:`tjobs.delivery.spill`), counted here as spilled.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable

from tjobs.delivery.in_flight import Delivery
from tjobs.delivery.limiter import AppLimiter

LONG_WAIT_MS = 30_000
"""A delivery taken from its queue this long after it was queued has its flow read before the attempt
(``Delivery.recheck``): its task may have been deleted, or the flow ended elsewhere, meanwhile. One taken sooner
pays no read: a node seconds behind at its peak rate adds no read a send to the database it is waiting on, only a
queue behind a slow or rate-limited app does (the compensator's grace, 30 s by default, is as long)."""

PACE_WINDOW_MS = 30_000
"""A lane's drain rate is the takes of its last window this long (or longer: a window ends at a take)."""

KEEP_AHEAD_MS = 120_000
"""A lane keeps in memory the deliveries its app drains in this long, at its pace (its ``rate_limit_per_s`` until it
has one): more than a compensation pass, a grace and a lease (51 s with the defaults), the longest a spilled flow may
wait to be taken back once there is room for it."""

KEEP_MIN = 100_000
"""Deliveries a lane keeps in memory whatever its pace (``callbacks.queue_keep_min``; ~160 MB of a node's memory with
their tasks and flows): so an app draining up to ~3,000 a second is not spilled at a burst's start, while its lane
knows no pace yet (its first :data:`PACE_WINDOW_MS`), and waits for no compensator pass."""


class Lane:
    """One app's queue of deliveries ready for an attempt, how many workers drain it, and how fast.

    ``added`` and ``taken`` count the deliveries queued here and taken from here: a delivery queued as the ``n``-th
    (its ``turn``, -1 once taken) has ``n - taken`` ahead of it (:meth:`Lanes.drop_lost` renumbers the rest)."""

    __slots__ = (
        "added",
        "app_id",
        "mark_ms",
        "mark_taken",
        "per_ms",
        "queue",
        "rate_per_s",
        "spill_taken",
        "spilled_added",
        "taken",
        "workers",
    )

    def __init__(self, app_id: str, now_ms: int) -> None:
        self.app_id = app_id
        self.queue: deque[Delivery] = deque()
        self.workers = 0
        self.added = 0
        self.taken = 0
        self.rate_per_s = 0.0  # the app's rate limit as last queued (0: none)
        # its flows spilled to the store (tjobs.delivery.spill), numbered apart from the queue's, and those taken back
        # or let go since
        self.spilled_added = 0
        self.spill_taken = 0
        self.per_ms = 0.0  # takes a millisecond over the last whole window
        self.mark_ms = now_ms  # where the window under way began, and the takes by then
        self.mark_taken = 0

    @property
    def spilled(self) -> int:
        """Its flows waiting in the store."""
        return self.spilled_added - self.spill_taken

    def took(self, now_ms: int) -> None:
        self.taken += 1
        elapsed = now_ms - self.mark_ms
        if elapsed >= PACE_WINDOW_MS:
            self.per_ms = (self.taken - self.mark_taken) / elapsed
            self.mark_ms, self.mark_taken = now_ms, self.taken

    def pace(self, now_ms: int) -> float:
        """Takes a millisecond as of now: the last window's, or less if nothing was taken for a window since."""
        elapsed = now_ms - self.mark_ms
        if elapsed < PACE_WINDOW_MS:
            return self.per_ms
        return min(self.per_ms, (self.taken - self.mark_taken) / elapsed)


class Lanes:
    """Every app's lane: ``attempt`` makes one attempt of a delivery (in its app's limiter slot); ``failed`` is told of
    one whose attempt raised (a bug, not a receiver failure); workers take deliveries while ``running()``."""

    def __init__(
        self,
        limiter: AppLimiter,
        attempt: Callable[[Delivery], Awaitable[None]],
        failed: Callable[[Delivery], None],
        running: Callable[[], bool],
        keep_min: int = KEEP_MIN,
    ) -> None:
        self._limiter = limiter
        self._keep_min = keep_min
        self._attempt = attempt
        self._failed = failed
        self._running = running
        self._lanes: dict[str, Lane] = {}
        self._workers: set[asyncio.Task[None]] = set()

    @property
    def backlog(self) -> int:
        """Deliveries waiting in app queues for a slot, spilled ones too."""
        return sum(len(lane.queue) + lane.spilled for lane in self._lanes.values())

    def keeps(self, app_id: str) -> bool:
        """Whether the app's lane keeps one more delivery in memory (see the module): its pace, or while it has none
        (its first window, or a window with no take), its ``rate_limit_per_s``, sets what it drains."""
        lane = self._lanes.get(app_id)
        if lane is None or len(lane.queue) < self._keep_min:
            return True
        pace_per_ms = lane.pace(self._monotonic_ms()) or lane.rate_per_s / 1000
        return len(lane.queue) < max(self._keep_min, pace_per_ms * KEEP_AHEAD_MS)

    def spill(self, app_id: str, rate_limit_per_s: float) -> int:
        """Count a flow of the app that waits in the store instead of its queue; returns its number among them."""
        lane = self._lane(app_id, rate_limit_per_s)
        lane.spilled_added += 1
        return lane.spilled_added - 1

    def unspill(self, app_id: str) -> None:
        """A spilled flow of the app is taken back, or let go: no longer counted here."""
        lane = self._lanes.get(app_id)
        if lane is not None:
            lane.spill_taken += 1
            self._forget_if_idle(lane)

    def spilled_wait_ms(self, app_id: str, number: int) -> float:
        """How long until the spilled flow ``number`` of the app would be taken for its attempt, were the ones spilled
        before it taken back first: the app's queue and those ahead of it at the pace it drains now (as
        :meth:`wait_ms`)."""
        lane = self._lanes.get(app_id)
        if lane is None:
            return 0.0
        pace = lane.pace(self._monotonic_ms())
        ahead = len(lane.queue) + max(number - lane.spill_taken, 0) + 1
        return ahead / pace if pace > 0 else math.inf

    def add(self, delivery: Delivery) -> None:
        """Queue ``delivery`` in its app's lane, with a worker more if the app's concurrency allows one."""
        app = delivery.job.app
        lane = self._lane(app.id, app.rate_limit_per_s)
        delivery.turn = lane.added
        delivery.queued_mono_ms = self._monotonic_ms()
        lane.added += 1
        lane.queue.append(delivery)
        # Every live worker is in an attempt or about to take an entry queued before this one, so with
        # all of them started this delivery waits for the app's concurrency cap.
        delivery.queued = lane.workers >= max(app.max_concurrency, 1)
        if not delivery.queued:
            lane.workers += 1
            worker = asyncio.get_running_loop().create_task(self._work(lane))
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)

    def queues(self) -> list[tuple[str, int, float | None]]:
        """Each app with deliveries waiting here (spilled ones too): its id, how many, and how long they take to drain
        at the pace its queue drains now, in seconds (None while it has no pace: the first window, or nothing taken
        for one)."""
        now_ms = self._monotonic_ms()
        waiting = [
            (lane.app_id, len(lane.queue) + lane.spilled, lane.pace(now_ms))
            for lane in self._lanes.values()
            if lane.queue or lane.spilled
        ]
        return [(app_id, queued, queued / pace / 1000 if pace > 0 else None) for app_id, queued, pace in waiting]

    def wait_ms(self, delivery: Delivery | None) -> float:
        """How long until a worker takes ``delivery`` for an attempt, at the pace its app's queue drains now: 0 if it
        is not queued (under way, waiting for its retry, its outcome being written, or None), ``math.inf`` if it is
        and nothing was taken from its queue for a window."""
        if delivery is None or delivery.turn < 0:
            return 0.0
        lane = self._lanes.get(delivery.job.app.id)
        if lane is None:
            return 0.0
        pace = lane.pace(self._monotonic_ms())
        return (delivery.turn - lane.taken + 1) / pace if pace > 0 else math.inf

    def _monotonic_ms(self) -> int:
        """The limiter's clock (monotonic: a step of the wall clock is no wait, no pace), in milliseconds."""
        return int(self._limiter.now_s() * 1000)

    def _lane(self, app_id: str, rate_limit_per_s: float) -> Lane:
        lane = self._lanes.get(app_id)
        if lane is None:
            lane = self._lanes[app_id] = Lane(app_id, self._monotonic_ms())
        lane.rate_per_s = rate_limit_per_s
        return lane

    def _forget_if_idle(self, lane: Lane) -> None:
        """Drop ``lane`` once nothing of its app waits or is under way here (its pace is forgotten with it)."""
        if lane.workers == 0 and not lane.queue and not lane.spilled and self._lanes.get(lane.app_id) is lane:
            del self._lanes[lane.app_id]

    def drop_lost(self) -> None:
        """Take the deliveries let go (``lost``) out of the queues: their turns are not waited for, and those behind
        them move up (their ``turn`` counts only the deliveries still ahead)."""
        for lane in self._lanes.values():
            kept = [delivery for delivery in lane.queue if not delivery.lost]
            for delivery in lane.queue:
                delivery.turn = -1
            for position, delivery in enumerate(kept):
                delivery.turn = lane.taken + position
            lane.added = lane.taken + len(kept)
            lane.queue.clear()
            lane.queue.extend(kept)

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the workers (each ends after its attempt once not ``running()``), then
        cancel the rest. The queues keep what no worker took."""
        if self._workers:
            _, late = await asyncio.wait(set(self._workers), timeout=max(timeout_s, 0.0))
            for worker in late:
                worker.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    def clear(self) -> None:
        self._lanes.clear()

    async def _work(self, lane: Lane) -> None:
        try:
            while lane.queue and self._running():
                delivery = lane.queue.popleft()
                turn, delivery.turn = delivery.turn, -1
                now_ms = self._monotonic_ms()
                lane.took(now_ms)
                if now_ms - delivery.queued_mono_ms >= LONG_WAIT_MS:
                    delivery.recheck = True
                delivery.retry_at_ms = None  # its retry's turn: handed back as unsent now, if let go
                app = delivery.job.app
                started = False
                try:
                    async with self._limiter.slot(
                        lane.app_id, app.rate_limit_per_s, app.max_concurrency, queued=delivery.queued
                    ):
                        started = True
                        await self._attempt(delivery)
                except asyncio.CancelledError:
                    if not started:  # a stop's drain ran out while it waited for its app's limits: never sent
                        delivery.turn = turn
                        lane.queue.appendleft(delivery)  # back in its queue, handed back as queued
                    raise
                except Exception:  # a bug, not a receiver failure
                    self._failed(delivery)
        finally:
            lane.workers -= 1
            self._forget_if_idle(lane)
