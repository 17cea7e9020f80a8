"""Every node's service-level minutes, added to the store every ``slo.flush_s``, so any node answers for all.

Each pass takes what :class:`tjobs.observability.slo.MinuteFolds` folded since the last one (per app and
minute: fires, outcomes, misses, throttled, lateness slots) and adds it to this node's rows of those
minutes and of their hours in one transaction (:meth:`TaskStore.add_slo_minutes`): one write per node
per minute, whatever the fire rate. A pass the store refuses gives its minutes back, to go with the
next one. Once an hour it drops the whole hours older than ``retention_days``. Stopping the node adds
what is left.
"""

from __future__ import annotations

import logging

from tjobs.clock import Clock
from tjobs.observability.slo import MS_PER_MINUTE, MinuteFolds
from tjobs.periodic import PeriodicPass
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

FLUSH_S = 60.0
RETENTION_DAYS = 8  # the longest window (7 d) and a day to spare
PURGE_EVERY_MS = 3_600_000
PURGE_BATCH = 10_000


class SloRecorder(PeriodicPass):
    name = "slo_recorder"

    def __init__(
        self,
        store: TaskStore,
        folds: MinuteFolds,
        node_id: str,
        clock: Clock,
        interval_s: float = FLUSH_S,
        retention_days: int = RETENTION_DAYS,
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._folds = folds
        self._node_id = node_id
        self._clock = clock
        self._retention_minutes = retention_days * 1440
        self._purged_at_ms: int | None = None

    async def run_once(self) -> int:
        minutes = self._folds.take()
        if minutes:
            try:
                await self._store.add_slo_minutes(self._node_id, minutes)
            except Exception:
                self._folds.give_back(minutes)
                raise
        now_ms = self._clock.now_ms()
        if self._purged_at_ms is None or now_ms - self._purged_at_ms >= PURGE_EVERY_MS:
            self._purged_at_ms = now_ms
            await self._store.purge_slo_minutes(now_ms // MS_PER_MINUTE - self._retention_minutes, PURGE_BATCH)
        return len(minutes)

    async def stop(self, timeout_s: float = 5.0) -> None:
        await super().stop(timeout_s)
        try:
            await self.run_once()
        except Exception:
            logger.warning("could not add the last service-level minutes", exc_info=True, extra={"action": "slo_lost"})
