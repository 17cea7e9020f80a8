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

The same pass applies the apps' run log retention (``run_log_retention_days``, README "Job runs"): in
each shard it visits, after the flows' purge, for each app whose log retention is shorter than the
flows', it clears the logs of the app's flows that ended longer ago, a page of ``batch`` flows a
statement (:meth:`tjobs.stores.contracts.runs.RunRecords.purge_run_logs`: one short transaction along
the index ``flows_TT_app_at (app_id, scheduled_at, task_id)``), under the same budget. Each (shard, app)
walk goes on from where the last page stopped; a walk that reached the cut-off starts the next at the
first flow it left unsettled (open, or ended after the cut-off: its log may be due later), else after
its last flow, so cleared flows are not read again. The walks' places are this node's memory: a node
that starts or takes a shard over walks each app's flows of it once from the oldest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tjobs.clock import Clock
from tjobs.errors import StorageUnavailable
from tjobs.periodic import PeriodicPass
from tjobs.settings import RetentionSettings
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

SHARDS_PER_PASS = 16  # each visit reads the shard's oldest flows and completed tasks once, at least
DAY_MS = 86_400_000
RUN_LOG_RETENTION = "run_log_retention_days"  # the app setting (tjobs.service.apps)


@dataclass(slots=True)
class _LogWalk:
    """Where an app's log walk of one shard stands: the key (instant, task id) its next page starts after,
    and the first flow this walk left unsettled (where the next walk starts)."""

    after: tuple[int, int] | None = None
    restart: tuple[int, int] | None = None


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
        self.logs_cleared = 0
        self.backlog = False  # the last pass ended on its budget with rows left
        self._log_walks: dict[tuple[int, str], _LogWalk] = {}

    async def run_once(self) -> int:
        owned = sorted(self._owned())
        if not owned:
            return 0
        settings = self._settings
        deadline = self._monotonic() + settings.pass_budget_s
        cutoff_ms = self._clock.now_ms() - int(settings.days * 86_400_000)
        start = next((i for i, shard in enumerate(owned) if shard >= self._next_shard), 0)
        visits = min(SHARDS_PER_PASS, len(owned))
        log_cuts = await self._log_cuts(settings.days)
        if log_cuts is None:
            log_cuts = {}
        else:  # the walks of shards given up and of apps without a policy now are forgotten
            mine = set(owned)
            self._log_walks = {k: w for k, w in self._log_walks.items() if k[0] in mine and k[1] in log_cuts}
        purged = cleared = 0
        self.backlog = False
        for step in range(visits):
            shard = owned[(start + step) % len(owned)]
            self._next_shard = shard  # where the next pass starts if this one stops here
            while True:
                deleted = await self._store.purge(shard, cutoff_ms, settings.batch)
                purged += deleted
                if deleted < settings.batch:
                    break  # nothing old enough left in this shard
                if self._spent(deadline):
                    break
            for app_id, cut_ms in log_cuts.items():
                if self.backlog:
                    break
                cleared += await self._clear_logs(shard, app_id, cut_ms, deadline)
            if self.backlog:
                break
        if not self.backlog:
            self._next_shard = owned[(start + visits) % len(owned)]
        self._interval_s = settings.pass_budget_s if self.backlog else settings.interval_s
        self.purged += purged
        self.logs_cleared += cleared
        if cleared:
            logger.info(
                "cleared %d run logs past their apps' log retention%s",
                cleared,
                "; logs left, budget spent" if self.backlog else "",
                extra={"action": "retention_run_logs_cleared"},
            )
        if purged:
            logger.info(
                "purged %d rows older than %d%s",
                purged,
                cutoff_ms,
                "; rows left, budget spent" if self.backlog else "",
                extra={"action": "retention_purged"},
            )
        return purged + cleared

    def _spent(self, deadline: float) -> bool:
        """The pass's budget is spent, or a stop asked: it ends here with rows left (``backlog``)."""
        if self._monotonic() >= deadline or self._stopping.is_set():
            self.backlog = True
        return self.backlog

    async def _log_cuts(self, days: float) -> dict[str, int] | None:
        """The apps whose run log retention is shorter than the flows' (``days``), with their cut-offs: a
        log of a flow that ended before it is cleared. One read of the apps a pass; ``None`` (the logs
        wait for the next pass, the walks keep their places) when the apps' server does not answer."""
        now_ms = self._clock.now_ms()
        cuts: dict[str, int] = {}
        try:
            apps = await self._store.list_apps()
        except StorageUnavailable as error:  # the apps' server: the shards' flows are purged all the same
            logger.warning(
                "run log retention skipped this pass: the apps could not be read (%s)",
                error,
                extra={"action": "retention_run_logs_skipped"},
            )
            return None
        for app in apps:
            value = app.settings.get(RUN_LOG_RETENTION)
            if value is not None and float(value) < days:  # a longer one: the flows' purge takes the logs
                cuts[app.id] = now_ms - int(float(value) * DAY_MS)
        return cuts

    async def _clear_logs(self, shard: int, app_id: str, cut_ms: int, deadline: float) -> int:
        """Pages of app ``app_id``'s log walk of ``shard`` until it reaches ``cut_ms`` or the budget is spent."""
        batch = self._settings.batch
        walk = self._log_walks.setdefault((shard, app_id), _LogWalk())
        cleared = 0
        while True:
            page = await self._store.purge_run_logs(shard, app_id, cut_ms, batch, walk.after)
            cleared += page.cleared
            if walk.restart is None:
                walk.restart = page.unsettled
            if page.read < batch:  # the cut-off reached: the next walk starts at its first unsettled flow
                restart = walk.restart
                walk.after = (restart[0], restart[1] - 1) if restart is not None else (page.last or walk.after)
                walk.restart = None
                return cleared
            walk.after = page.last
            if self._spent(deadline):
                return cleared
