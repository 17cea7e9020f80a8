"""Reconciliation of the task counts, one shard table per step.

The counts change with every task write (:mod:`tjobs.service.task_counts`); nothing should put them off,
but a bug, a hand-made change of the tables or a write during a migration could. Each step recounts one
shard table (:meth:`tjobs.stores.contracts.TaskRecords.reconcile_task_counts`: that table's tasks and
count rows in one snapshot, the difference added to the rows as they are now, exact against writers
committing meanwhile, none of which waits), then rests ``limits.task_count_reconcile_step_s``. The
live nodes share the tables (a node of rank ``r`` among ``n`` takes those whose shard is ``r`` modulo
``n``), so each table is recounted once per round: 512 tables at the default 10 s a step are a round
of about 85 minutes, whatever the node count; a step reads one table only.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from tjobs.cancellation import stop_task
from tjobs.cluster.limit_shares import SOLE_NODE, Membership
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)


class TaskCountReconciler:
    def __init__(
        self,
        store: TaskStore,
        step_s: float,
        membership: Callable[[], Membership] = lambda: SOLE_NODE,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._step_s = step_s
        self._membership = membership
        self._sleep = sleep
        self._next = random.randrange(store.topology.shard_count)  # nodes started together spread out
        self._loop: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.create_task(self._run(), name="task-count-reconciler")

    async def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            await stop_task(loop)

    async def step(self) -> int:
        """Recount the next shard table of this node's share; the shard recounted."""
        shard_count = self._store.topology.shard_count
        nodes, rank = self._membership()
        shard = self._next
        for _ in range(max(1, nodes)):
            if nodes <= 1 or shard % nodes == rank:
                break
            shard = (shard + 1) % shard_count
        self._next = (shard + 1) % shard_count
        found = await self._store.reconcile_task_counts(shard)
        if found:
            logger.warning(
                "task counts of shard %d corrected: %s",
                shard,
                ", ".join(f"{c.app_id} {c.status} {c.by:+d}" for c in found),
                extra={"action": "task_counts_corrected", "shard": shard},
            )
        return shard

    async def _run(self) -> None:
        while True:
            await self._sleep(self._step_s)
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a database down: the next step takes the next table
                logger.warning("reconciling task counts failed: %s", error, extra={"action": "task_count_failed"})
