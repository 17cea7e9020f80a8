"""The hot-path contract: hand a task change to whichever node owns its shard, within the cycle.

A change whose instant falls before the owning node's loaded horizon would otherwise wait for the next
cycle load; the hot tier closes that gap. It is never the truth (invariant 7, docs/design.md): a lost
change costs latency (the next load or the fire CAS catches it), never a fire.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tjobs.cancellation import cancel_until_done
from tjobs.model import Task, TaskStatus
from tjobs.observability.observer import NO_OBSERVER, FireObserver


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
# Told that changes published for this node's shards may be lost (a remote tier's state was flushed or
# rolled back, or a publisher could not write): the node reads its jobs again (``Runner.reload``).
ChangesLost = Callable[[], Awaitable[None]]


def is_near(change: TaskChange, now_ms: int, near_ms: int) -> bool:
    """Whether an owning wheel could hold this change: a stop, an update, or an instant within reach."""
    return change.next_run_at_ms is None or change.version > 1 or change.next_run_at_ms < now_ms + near_ms


class HotTier(ABC):
    """Delivers changes to the node that owns their shard.

    What every implementation guarantees (``tests/contract/test_hot_tier_contract.py``):

    * ``publish`` hands the change to this node's own listener before it returns, so the publishing
      node's shards never depend on a remote tier;
    * a change published on one node reaches the listener of the node that :meth:`watch` es its shard,
      if published after that call; a remote tier applies no other shard's changes (the listener
      also ignores shards it does not own, and never replaces a newer version with an older one);
    * ``publish`` never raises for a hot-tier outage (log and return: the store holds the truth), and
      a tier that lost its state (flush, restart) keeps delivering the changes published after it;
    * the Redis tier, which can lose a change published for a watched shard (a flush, a restart, a
      publisher that could not write), calls ``lost`` once per such event, at its next poll after it,
      so that the node reads its jobs again: a lost change then costs a poll and a load, not a cycle.
      The in-process tier loses nothing; the DB poll's failed writes still wait for the cycle load.
    """

    tier = "local"  # the ``tier`` label of ``tjobs_hot_tier_lag_seconds``
    # Whether every change to a task this node fires reaches its listener before the write is
    # answered: true only of the in-process tier of a node without a cluster (it owns every shard and
    # every write goes through it). Then a cycle load need not read again the span it loaded before
    # (docs/design.md, invariant 7); a tier that can lose a change leaves that read to the cycle load.
    complete = False

    def __init__(self) -> None:
        self._observer: FireObserver = NO_OBSERVER

    @abstractmethod
    async def start(
        self, listener: ChangeListener, observer: FireObserver = NO_OBSERVER, lost: ChangesLost | None = None
    ) -> None:
        """Begin delivering changes for this node's owned shards to ``listener``; a remote tier tells
        ``observer`` each change's lag from its publish to its apply here, and ``lost`` when changes
        for them may have been lost."""

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def publish(self, change: TaskChange) -> None:
        """Route ``change`` to the shard's owner. Must not raise for a hot-tier outage: log and
        return, since the store already holds the truth."""

    async def publish_many(self, changes: Sequence[TaskChange]) -> None:
        """:meth:`publish` each of ``changes``, in order (a batch create's tasks). Default: one by one; the
        in-process tier hands them to its listener without a coroutine each."""
        for change in changes:
            await self.publish(change)

    async def watch(self, shards: frozenset[int]) -> None:
        """The shards this node owns from now on; awaited right before the runner loads gained shards.

        A remote tier applies only these shards' changes. For a gained shard it delivers those
        published from this call on: older ones were committed before the load that follows reads
        the store, so replaying them would only re-offer fires the store already settled. Default
        (the in-process path, whose one node owns everything): nothing to do.
        """
        return None

    def _observe_lag(self, published_at_ms: int, now_ms: int) -> None:
        self._observer.hot_tier_lag(self.tier, max(now_ms - published_at_ms, 0) / 1000)


async def cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel a background loop and wait for its end, cancelling again if the cancellation was lost
    (Python 3.11's ``asyncio.wait_for``, used by redis-py around every socket write, can swallow a
    cancellation that arrives as the inner write completes: :func:`tjobs.cancellation.cancel_until_done`);
    what the loop ended with, if it failed, is logged."""
    failure = await cancel_until_done(task)
    if failure is not None:
        logging.getLogger(__name__).warning("hot tier loop ended with %r", failure)
