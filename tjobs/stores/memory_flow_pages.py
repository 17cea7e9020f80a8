"""The memory twin's pages of a task's flows (:meth:`TaskRecords.list_flows`, older or newer) and a page of
tasks' health (:meth:`TaskRecords.task_health`), over :class:`tjobs.stores.memory.MemoryTaskStore`'s flows."""

from __future__ import annotations

from abc import abstractmethod
from collections import Counter
from collections.abc import Collection
from dataclasses import replace

from tjobs.model import Flow, TaskHealth
from tjobs.stores.contracts.tasks import TaskRecords


class MemoryFlowPages(TaskRecords):
    _flows: list[dict[tuple[int, int], Flow]]  # per shard, by (task_id, scheduled_at_ms): the store's own

    @abstractmethod
    def _shard_of(self, task_id: int) -> int | None:
        """The shard of ``task_id`` (``None``: no shard of the topology)."""

    def _task_flows(self, task_id: int) -> list[Flow]:
        """The task's flows, newest first."""
        shard = self._shard_of(task_id)
        if shard is None:
            return []
        flows = [f for f in self._flows[shard].values() if f.task_id == task_id]
        return sorted(flows, key=lambda f: f.scheduled_at_ms, reverse=True)

    async def list_flows(
        self,
        task_id: int,
        limit: int,
        before_scheduled_at_ms: int | None = None,
        after_scheduled_at_ms: int | None = None,
    ) -> list[Flow]:
        before, after = before_scheduled_at_ms, after_scheduled_at_ms
        flows = [
            f
            for f in self._task_flows(task_id)
            if (before is None or f.scheduled_at_ms < before) and (after is None or f.scheduled_at_ms > after)
        ]
        page = flows[-limit:] if after is not None else flows[:limit]
        return [replace(f) for f in page]

    async def task_health(self, task_ids: Collection[int], since_ms: int, cap: int) -> dict[int, TaskHealth]:
        health: dict[int, TaskHealth] = {}
        for task_id in task_ids:
            flows = self._task_flows(task_id)
            newest = flows[0] if flows else None
            window = [f.status for f in flows if f.scheduled_at_ms >= since_ms][:cap]
            counts = Counter(window)
            health[task_id] = TaskHealth.of(
                None
                if newest is None
                else (newest.status, newest.scheduled_at_ms, newest.updated_at_ms, newest.attempts),
                dict(counts),
            )
        return health
