"""Per-app task counts for quotas and ``/v1/stats``, kept off the request path.

A background pass counts every app's tasks by status, and its dead letters, with one statement per
logical database (:meth:`tjobs.stores.base.TaskStore.count_by_app`), the databases one after another
so a pass holds at most one connection and never crowds the fire path. Requests read the last pass
(a *snapshot*) plus this node's own changes since that pass began (creates, pauses, resumes, deletes),
and the flows its deliverer wrote dead or a redrive put back, so a client sees its own writes at once;
what other nodes did and tasks completing appear with the next pass (every
``limits.task_count_refresh_s``, and soon after a stats read once the counter has rested since its last
pass: at least 2 s and four times as long as that pass took, so reads keep it counting at most a fifth
of the time however large the tables).

The quota is held across the cluster by dividing the room a pass left among the live nodes
(:mod:`tjobs.cluster.limit_shares`): each node admits creates while its own additions since its pass
fit in its share, so other nodes' creates need not be seen until the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass

from sharding import shard_of_task_id
from tjobs.cancellation import stop_task
from tjobs.clock import Clock
from tjobs.model import TaskStatus
from tjobs.stores.base import DEAD_LETTERS, TaskStore

logger = logging.getLogger(__name__)

MIN_ASKED_PASS_INTERVAL_S = 2.0  # rest after a pass before a read may ask for the next
ASKED_PASS_REST_FACTOR = 4.0  # ... and at least this many times the last pass's duration


@dataclass(frozen=True, slots=True)
class AppCounts:
    """One app's counts; ``counted_at_ms`` is when the pass behind them started (``None``: none yet)."""

    active: int
    paused: int
    completed: int
    dead_letters: int
    counted_at_ms: int | None


class TaskCounts:
    def __init__(self, store: TaskStore, clock: Clock, refresh_s: float) -> None:
        self._store = store
        self._clock = clock
        self._refresh_s = refresh_s
        self._snapshot: dict[str, Counter[str]] = {}
        self._counted_at_ms: int | None = None
        self._next_asked_pass_ms: int | None = None  # a read may ask for a pass from then on
        self._since_snapshot: defaultdict[str, Counter[str]] = defaultdict(Counter)
        # changes to databases the running pass has counted already: the next snapshot misses them
        self._after_counted: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._counted_databases: set[int] | None = None  # of the running pass
        self._reading_database: int | None = None  # the one the running pass is reading
        # additions reported while their database was being read (the running pass's), and the last
        # pass's, which the running pass will surely see: the quota counts both, the stats neither
        self._uncertain: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._uncertain_kept: dict[str, Counter[str]] = {}
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._passing = asyncio.Lock()

    async def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.create_task(self._run(), name="task-counts")

    async def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            await stop_task(loop)  # cancelled again if a driver's wait_for lost it (gh-86296)

    def of(self, app_id: str) -> AppCounts:
        """The app's counts: the last pass plus this node's changes since it began (never negative)."""
        counts = Counter(self._snapshot.get(app_id, Counter()))
        counts.update(self._since_snapshot.get(app_id, Counter()))
        return AppCounts(
            active=max(0, counts[TaskStatus.ACTIVE.value]),
            paused=max(0, counts[TaskStatus.PAUSED.value]),
            completed=max(0, counts[TaskStatus.COMPLETED.value]),
            dead_letters=max(0, counts[DEAD_LETTERS]),
            counted_at_ms=self._counted_at_ms,
        )

    def active_split(self, app_id: str) -> tuple[int, int]:
        """For the quota's share: the app's active tasks at the last pass (``0`` before the first) and this
        node's net change to them since, with the additions a pass may have missed (so at least :meth:`of`'s
        ``active``, never fewer than stored)."""
        counted = self._snapshot.get(app_id)
        active = TaskStatus.ACTIVE.value
        own = sum(
            deltas[app_id][active]
            for deltas in (self._since_snapshot, self._uncertain, self._uncertain_kept)
            if app_id in deltas
        )
        return (counted[active] if counted else 0), own

    def changed(self, app_id: str, task_id: int, before: TaskStatus | None, after: TaskStatus | None) -> None:
        """Record this node's change of a task from ``before`` to ``after`` (``None``: absent), after
        it committed. Kept until a pass that counted the task's database after the change ends."""
        self._count(app_id, task_id, None if before is None else before.value, None if after is None else after.value)

    def dead_letter_changed(self, app_id: str, task_id: int, dead: bool) -> None:
        """Record that this node's deliverer wrote a flow of the task dead (``dead``), or that a dead
        letter of it was put back to pending: the app's stats show their own dead letters at once, as
        they show their own task changes, instead of after the next pass (which a busy database can
        hold back past ten seconds). Reported when the outcome is handed to its writer: a pass reading
        the database before the write lands misses it until the next, never counts it twice."""
        self._count(app_id, task_id, None if dead else DEAD_LETTERS, DEAD_LETTERS if dead else None)

    def _count(self, app_id: str, task_id: int, removed: str | None, added: str | None) -> None:
        counted = self._counted_databases
        database = shard_of_task_id(task_id) // self._store.topology.tables_per_database
        since = self._since_snapshot[app_id]
        if removed is not None:
            since[removed] -= 1
        if added is not None:
            since[added] += 1
        if counted is None:
            return
        carried = self._after_counted[app_id]
        if database in counted:  # its read is over: the next snapshot misses the change
            if removed is not None:
                carried[removed] -= 1
            if added is not None:
                carried[added] += 1
        elif database == self._reading_database and added is not None:
            # Its read is running: whether its snapshot saw the change is unknown. The quota counts the
            # addition until the next pass has surely seen it (never fewer active than stored: dropping
            # it let the quota pass, tests/unit/test_task_counts_race.py); the stats do not (counting it
            # may show it twice). A removal is not carried (the same choice for the quota).
            self._uncertain[app_id][added] += 1

    def refresh_soon(self) -> None:
        """Ask the background loop for a pass now rather than at the end of its period, unless the last
        pass ended less than :data:`MIN_ASKED_PASS_INTERVAL_S`, or :data:`ASKED_PASS_REST_FACTOR` times
        its duration, ago (reads cannot drive a scan loop, however long a pass takes)."""
        next_ms = self._next_asked_pass_ms
        if next_ms is None or self._clock.now_ms() >= next_ms:
            self._wake.set()

    async def refresh(self) -> None:
        """One full pass (the background loop's; callable directly, e.g. by tests and tools)."""
        async with self._passing:
            started_ms = self._clock.now_ms()
            self._after_counted = defaultdict(Counter)
            self._counted_databases = set()
            totals: dict[str, Counter[str]] = defaultdict(Counter)
            try:
                for database in range(self._store.topology.database_count):
                    self._reading_database = database
                    for app_id, counts in (await self._store.count_by_app(database)).items():
                        totals[app_id].update(counts)
                    self._counted_databases.add(database)
            finally:
                self._counted_databases = None
                self._reading_database = None
            self._snapshot = dict(totals)
            self._since_snapshot = self._after_counted
            self._uncertain_kept, self._uncertain = dict(self._uncertain), defaultdict(Counter)
            self._counted_at_ms = started_ms
            ended_ms = self._clock.now_ms()
            self._next_asked_pass_ms = ended_ms + int(
                max(MIN_ASKED_PASS_INTERVAL_S * 1000, ASKED_PASS_REST_FACTOR * (ended_ms - started_ms))
            )

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a database down: keep the last snapshot, try next period
                logger.warning("counting tasks failed: %s", error, extra={"action": "task_count_failed"})
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._refresh_s):
                    await self._wake.wait()
