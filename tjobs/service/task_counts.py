"""Per-app task counts for quotas and ``/v1/stats``, read from the stores' counts, never from the tasks.

Every write that creates or deletes a task or changes its status changes its logical database's counts
in its own transaction (:meth:`tjobs.stores.contracts.TaskRecords.read_task_counts`), so a read of the
counts is exact as of that read, whatever node wrote.

- **Stats** (:meth:`TaskCounts.of`) read them at the request: one statement per logical database, an
  index range of the app's rows, read concurrently; the dead letters too, now
  (:meth:`~tjobs.stores.contracts.TaskRecords.count_dead_letters`, an index range of the app's dead
  flows). A client sees its own writes and every other node's at once.
- **The quota** is checked on every create, too often for a read each: the node reads every app's
  counts in the background (one statement per logical database over its count rows, however many tasks
  they count; every ``limits.task_count_refresh_s``, and :data:`ASKED_READ_DELAY_S` after a refusal)
  and adds its own net change since (:meth:`TaskCounts.active_split`). A change whose write overlapped a
  read may or may not be in it: its additions are counted, its removals not until the next read, so the
  quota errs toward refusing, never toward admitting. It is held across the cluster by dividing the
  room a read left among the live nodes (:mod:`tjobs.cluster.limit_shares`).
- **Reconciliation** (:class:`tjobs.service.task_count_reconciler.TaskCountReconciler`) recounts one
  shard table per step, so counts a bug or a hand-made change put off are set right without any pass
  reading every row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from tjobs.cancellation import stop_task
from tjobs.clock import Clock
from tjobs.model import TaskStatus
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

ASKED_READ_DELAY_S = 2.0
"""A quota refusal asks for a read this long after it, one pending at a time: a node refused for its
share re-divides the room left soon, while a burst from rest shorter than this (every node's last read
the same) ends at the quota exactly instead of re-dividing room the other nodes' shares still cover."""


@dataclass(frozen=True, slots=True)
class AppCounts:
    """One app's counts; ``counted_at_ms`` is when the read behind them started."""

    active: int
    paused: int
    completed: int
    dead_letters: int
    counted_at_ms: int


class TaskCounts:
    def __init__(
        self, store: TaskStore, clock: Clock, refresh_s: float, asked_read_delay_s: float = ASKED_READ_DELAY_S
    ) -> None:
        self._store = store
        self._clock = clock
        self._refresh_s = refresh_s
        self._counted: dict[str, int] = {}  # every app's active tasks at the last read
        self._asked_read_delay_s = asked_read_delay_s
        self._asked: asyncio.TimerHandle | None = None  # a read a refusal asked for, pending
        self._since: defaultdict[str, int] = defaultdict(int)  # this node's net change since, as the quota counts it
        self._overlapping: defaultdict[str, int] | None = None  # during a read: additions reported meanwhile
        self._epoch = 0  # one more at the end of every read
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._reading = asyncio.Lock()

    async def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.create_task(self._run(), name="task-counts")

    async def stop(self) -> None:
        loop, self._loop = self._loop, None
        asked, self._asked = self._asked, None
        if asked is not None:
            asked.cancel()
        if loop is not None:
            await stop_task(loop)  # cancelled again if a driver's wait_for lost it (gh-86296)

    async def of(self, app_id: str) -> AppCounts:
        """The app's counts now: its tasks per status from the counts of every logical database and its
        dead letters (never negative)."""
        started_ms = self._clock.now_ms()
        databases = range(self._store.topology.database_count)
        tasks, dead = await asyncio.gather(
            self.statuses((app_id,)),
            asyncio.gather(*(self._store.count_dead_letters(index, (app_id,)) for index in databases)),
        )
        counts = tasks[app_id]
        return AppCounts(
            active=counts[TaskStatus.ACTIVE.value],
            paused=counts[TaskStatus.PAUSED.value],
            completed=counts[TaskStatus.COMPLETED.value],
            dead_letters=sum(part.get(app_id, 0) for part in dead),
            counted_at_ms=started_ms,
        )

    async def statuses(self, app_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """Each app's tasks per status now (every status a key, never negative): one read per logical
        database, concurrently, of the apps' count rows."""
        databases = range(self._store.topology.database_count)
        parts = await asyncio.gather(*(self._store.read_task_counts(index, app_ids) for index in databases))
        return {app_id: {status.value: max(0, n) for status, n in _summed(app_id, parts).items()} for app_id in app_ids}

    def epoch(self) -> int:
        """Taken before a write whose change is reported (:meth:`changed`): tells whether the write
        began after the last read of the counts ended."""
        return self._epoch

    def changed(self, app_id: str, before: TaskStatus | None, after: TaskStatus | None, begun: int) -> None:
        """Record this node's change of one of the app's tasks from ``before`` to ``after`` (``None``:
        absent), once committed; ``begun`` is :meth:`epoch` as the write began."""
        active = TaskStatus.ACTIVE
        delta = (after is active) - (before is active)
        if not delta:
            return
        if self._overlapping is not None:
            self._overlapping[app_id] += max(0, delta)
        self._since[app_id] += delta if begun >= self._epoch else max(0, delta)

    def active_split(self, app_id: str) -> tuple[int, int]:
        """For the quota's share: the app's active tasks at this node's last read of the counts (``0``
        before the first) and this node's net change to them since (its additions that overlapped the
        read counted, its removals not)."""
        return self._counted.get(app_id, 0), self._since.get(app_id, 0)

    def refresh_soon(self) -> None:
        """Ask the background loop for a read :data:`ASKED_READ_DELAY_S` from now rather than at the end of
        its period (a quota refusal), unless one is asked for already."""
        if self._asked is None and self._loop is not None:
            self._asked = asyncio.get_running_loop().call_later(self._asked_read_delay_s, self._answer_asked)

    def _answer_asked(self) -> None:
        self._asked = None
        self._wake.set()

    async def refresh(self) -> None:
        """One read of every app's counts (the background loop's; callable directly, e.g. by tests)."""
        async with self._reading:
            self._overlapping = defaultdict(int)
            try:
                databases = range(self._store.topology.database_count)
                parts = await asyncio.gather(*(self._store.read_task_counts(index) for index in databases))
                active = TaskStatus.ACTIVE.value
                counted: defaultdict[str, int] = defaultdict(int)
                for part in parts:
                    for app_id, statuses in part.items():
                        counted[app_id] += statuses.get(active, 0)
                self._counted = dict(counted)
                self._since = self._overlapping
                self._epoch += 1
            finally:
                self._overlapping = None

    async def _run(self) -> None:
        while True:
            self._wake.clear()  # a read asked for while this one runs comes after it
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a database down: keep the last read, try next period
                logger.warning("reading task counts failed: %s", error, extra={"action": "task_count_failed"})
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._refresh_s):
                    await self._wake.wait()


def _summed(app_id: str, parts: Sequence[dict[str, dict[str, int]]]) -> dict[TaskStatus, int]:
    """The app's counts over every database's read (every status a key)."""
    counts = dict.fromkeys(TaskStatus, 0)
    for part in parts:
        for status, n in part.get(app_id, {}).items():
            counts[TaskStatus(status)] += n
    return counts
