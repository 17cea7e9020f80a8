"""Purge finished one-shot tasks and old flows after the retention period, a little at a time.

Each pass visits a handful of owned shards and deletes at most ``batch`` rows in each, so a purge
never holds locks long enough to slow the fire transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tjobs.clock import Clock
from tjobs.periodic import PeriodicPass
from tjobs.settings import RetentionSettings
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

SHARDS_PER_PASS = 16


class RetentionSweeper(PeriodicPass):
    name = "retention"

    def __init__(
        self, store: TaskStore, owned: Callable[[], frozenset[int]], settings: RetentionSettings, clock: Clock
    ) -> None:
        super().__init__(settings.interval_s)
        self._store = store
        self._owned = owned
        self._settings = settings
        self._clock = clock
        self._cursor = 0
        self.purged = 0

    async def run_once(self) -> int:
        owned = sorted(self._owned())
        if not owned:
            return 0
        cutoff_ms = self._clock.now_ms() - int(self._settings.days * 86_400_000)
        purged = 0
        for step in range(min(SHARDS_PER_PASS, len(owned))):
            shard = owned[(self._cursor + step) % len(owned)]
            purged += await self._store.purge(shard, cutoff_ms, self._settings.batch)
        self._cursor = (self._cursor + SHARDS_PER_PASS) % len(owned)
        self.purged += purged
        if purged:
            logger.info("purged %d rows older than %d", purged, cutoff_ms, extra={"action": "retention_purged"})
        return purged
