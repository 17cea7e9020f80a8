"""Does this node's clock agree with the database's? A node whose clock is off by more than
``cluster.clock_skew_max_ms`` fences itself (:meth:`tjobs.cluster.etcd.EtcdCoordinator.may_fire`).

Database reachability is not this check's business (:class:`tjobs.cluster.db_health.DatabaseHealth`):
a check that gets no answer changes nothing.
"""

from __future__ import annotations

import asyncio
import logging

from tjobs.clock import Clock
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

CLOCK_CHECK_INTERVAL_S = 5.0


class ClockCheck:
    def __init__(self, store: TaskStore, clock: Clock, max_skew_ms: int) -> None:
        self._store = store
        self._clock = clock
        self._max_skew_ms = max_skew_ms
        self.ok = True
        self.skew_ms = 0  # the database's clock minus this node's, at the last answer

    async def check(self) -> None:
        try:
            before = self._clock.now_ms()
            async with asyncio.timeout(2.0):
                database_ms = await self._store.database_now_ms()
            after = self._clock.now_ms()
        except Exception:
            return  # reachability is the health loop's business
        skew_ms = database_ms - (before + after) // 2
        self.skew_ms = skew_ms
        ok = abs(skew_ms) <= self._max_skew_ms + (after - before) // 2
        if not ok:
            logger.error(
                "CLOCK SKEW: this node's clock is %d ms %s the database's (limit %d ms); giving up my groups",
                abs(skew_ms),
                "behind" if skew_ms > 0 else "ahead of",
                self._max_skew_ms,
                extra={"action": "clock_skew", "skew_ms": skew_ms},
            )
        elif not self.ok:
            logger.info(
                "clock agrees with the database again (%d ms)",
                skew_ms,
                extra={"action": "clock_skew_cleared"},
            )
        self.ok = ok
