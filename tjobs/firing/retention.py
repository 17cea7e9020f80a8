"""Purge finished one-shot tasks and old flows after the retention period, in small batches, until
nothing old enough is left or the pass has spent its budget.

A pass visits up to :data:`SHARDS_PER_PASS` owned shards, from where the last one stopped; in each it
deletes ``batch`` rows a statement (each its own short transaction, so a purge never holds locks long
enough to slow the fire transaction) until a statement finds fewer than ``batch``. When
``pass_budget_s`` is spent with rows left, the pass stops at that shard and the next one starts there
after a rest as long as the budget (the sweeper deletes at most half the time); otherwise the next pass
visits the next shards after ``interval_s``. A node keeps up while the fires it owns add rows more slowly
than it deletes them in half its time (docs/operations.md, "Capacity model"). A stop asked mid-pass ends
it after the statement in progress.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tjobs.clock import Clock
from tjobs.periodic import PeriodicPass
from tjobs.settings import RetentionSettings
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

SHARDS_PER_PASS = 16  # each visit reads the shard's oldest flows and completed tasks once, at least


class RetentionSweeper(PeriodicPass):
    name = "retention"

    def __init__(
        self,
        store: TaskStore,
        owned: Callable[[], frozenset[int]],
        settings: RetentionSettings,
        clock: Clock,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(settings.interval_s)
        self._store = store
        self._owned = owned
        self._settings = settings
        self._clock = clock
        self._monotonic = monotonic
        self._next_shard = 0  # the first shard (or the next above it) the next pass visits
        self.purged = 0
        self.backlog = False  # the last pass ended on its budget with rows left

    async def run_once(self) -> int:
        owned = sorted(self._owned())
        if not owned:
            return 0
        settings = self._settings
        deadline = self._monotonic() + settings.pass_budget_s
        cutoff_ms = self._clock.now_ms() - int(settings.days * 86_400_000)
        start = next((i for i, shard in enumerate(owned) if shard >= self._next_shard), 0)
        visits = min(SHARDS_PER_PASS, len(owned))
        purged = 0
        self.backlog = False
        for step in range(visits):
            shard = owned[(start + step) % len(owned)]
            self._next_shard = shard  # where the next pass starts if this one stops here
            while True:
                deleted = await self._store.purge(shard, cutoff_ms, settings.batch)
                purged += deleted
                if deleted < settings.batch:
                    break  # nothing old enough left in this shard
                if self._monotonic() >= deadline or self._stopping.is_set():
                    self.backlog = True
                    break
            if self.backlog:
                break
        if not self.backlog:
            self._next_shard = owned[(start + visits) % len(owned)]
        self._interval_s = settings.pass_budget_s if self.backlog else settings.interval_s
        self.purged += purged
        if purged:
            logger.info(
                "purged %d rows older than %d%s",
                purged,
                cutoff_ms,
                "; rows left, budget spent" if self.backlog else "",
                extra={"action": "retention_purged"},
            )
        return purged
