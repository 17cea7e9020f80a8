"""The hot-path contract: hand a task change to whichever node owns its shard, within the cycle.

A change whose instant falls before the owning node's loaded horizon would otherwise wait for the next
cycle load; the hot path closes that gap. It is never the truth (invariant 7): a lost change costs
latency (the next load or the fire CAS catches it), never a fire.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from tjobs.model import Task, TaskStatus


@dataclass(frozen=True, slots=True)
class TaskChange:
    """The new state of a task after a create, update, pause, resume, fire or delete.

    ``next_run_at_ms`` is ``None`` when the task must not fire (deleted, paused or completed).
    """

    task_id: int
    app_id: str
    next_run_at_ms: int | None
    version: int

    @classmethod
    def of(cls, task: Task) -> TaskChange:
        runnable = task.status is TaskStatus.ACTIVE and task.next_run_at_ms is not None
        return cls(task.id, task.app_id, task.next_run_at_ms if runnable else None, task.version)

    @classmethod
    def deleted(cls, task_id: int, app_id: str) -> TaskChange:
        return cls(task_id, app_id, None, 1 << 62)


ChangeListener = Callable[[TaskChange], None]


class HotPath(ABC):
    @abstractmethod
    async def start(self, listener: ChangeListener) -> None:
        """Begin delivering changes for this node's owned shards to ``listener``."""

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def publish(self, change: TaskChange) -> None:
        """Route ``change`` to the shard's owner. Must not raise for a hot-tier outage: log and
        return, since the store already holds the truth."""
