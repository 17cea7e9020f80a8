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

A change this node makes while a pass reads its task's database is counted exactly once: the node marks
the tasks it is writing (:meth:`TaskCounts.writing`), and once a database's counting statement has run,
the store reads the status of those it changed or is changing in the same snapshot
(:meth:`tjobs.stores.base.TaskStore.count_by_app`), so the pass knows which changes its counts saw and
carries the others past it (a clean-clone run showed a new task both twice and not at all before).

The quota is held across the cluster by dividing the room a pass left among the live nodes
(:mod:`tjobs.cluster.limit_shares`): each node admits creates while its own additions since its pass
fit in its share, so other nodes' creates need not be seen until the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
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
        self._in_flight: Counter[int] = Counter()  # tasks this node is writing (until their report)
        # Of the database being read: its tasks this node reported changed meanwhile (app, last status),
        # then the tasks asked about once its counting statement ran; and, for the rest of the pass,
        # each asked task's app (once known) and status as this node last made it.
        self._touched: dict[int, tuple[str, str | None]] = {}
        self._asked: set[int] | None = None
        self._resolved: dict[int, tuple[str | None, str | None]] = {}
        # tasks still being written when a pass ended, as its counts saw them: their report changes the
        # counts from that status, whatever status the write began from
        self._seen_by_the_pass: dict[int, str | None] = {}
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
        node's net change to them since (together :meth:`of`'s ``active``)."""
        counted = self._snapshot.get(app_id)
        active = TaskStatus.ACTIVE.value
        since = self._since_snapshot.get(app_id)
        return (counted[active] if counted else 0), (since[active] if since else 0)

    @contextlib.contextmanager
    def writing(self, task_ids: Iterable[int]) -> Iterator[None]:
        """Around a write of these tasks and its report (:meth:`changed`): a pass reading their database
        meanwhile asks the store, in the counts' own snapshot, whether the counts saw the write."""
        ids = list(task_ids)
        self._in_flight.update(ids)
        try:
            yield
        finally:
            self._in_flight.subtract(ids)
            for task_id in ids:
                if self._in_flight[task_id] <= 0:
                    del self._in_flight[task_id]
                    self._seen_by_the_pass.pop(task_id, None)  # a write that failed reports nothing

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
        if task_id in self._seen_by_the_pass and DEAD_LETTERS not in (removed, added):
            removed = self._seen_by_the_pass.pop(task_id)
        since = self._since_snapshot[app_id]
        if removed is not None:
            since[removed] -= 1
        if added is not None:
            since[added] += 1
        counted = self._counted_databases
        if counted is None:
            return
        task_change = DEAD_LETTERS not in (removed, added)
        resolved = self._resolved.get(task_id) if task_change else None
        if resolved is not None:  # the counts saw the task as it then was: carry it from there
            self._carry(app_id, resolved[1], added)
            self._resolved[task_id] = (app_id, added)
            return
        database = shard_of_task_id(task_id) // self._store.topology.tables_per_database
        asked = self._asked
        if database in counted or (database == self._reading_database and asked is not None and task_id not in asked):
            # its read is over, or its write began after the counting statement: the next snapshot misses it
            self._carry(app_id, removed, added)
        elif database == self._reading_database and task_change:
            # its read is running: whether the counts saw it is asked of the store in their snapshot
            self._touched[task_id] = (app_id, added)
        # A dead letter reported while its database is read is left to the next pass (never counted twice).

    def _carry(self, app_id: str, removed: str | None, added: str | None) -> None:
        carried = self._after_counted[app_id]
        if removed is not None:
            carried[removed] -= 1
        if added is not None:
            carried[added] += 1

    def _ask(self, database: int) -> list[int]:
        """What the store reads in the counts' snapshot once they ran: the tasks of ``database`` this node
        reported changed during the read, or is writing now (committed perhaps, not reported yet)."""
        tables = self._store.topology.tables_per_database
        in_flight = (task_id for task_id in self._in_flight if shard_of_task_id(task_id) // tables == database)
        self._asked = {*self._touched, *in_flight}
        return sorted(self._asked)

    def _resolve(self, statuses: dict[int, str | None]) -> None:
        """Each asked task as the counts saw it against this node's last change of it: the difference is
        carried past the pass, and the task's later changes in this pass are carried from there."""
        for task_id, seen in statuses.items():
            app_id, last = self._touched.get(task_id, (None, seen))
            if app_id is not None and last != seen:
                self._carry(app_id, seen, last)
            self._resolved[task_id] = (app_id, last)

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
            self._resolved = {}
            totals: dict[str, Counter[str]] = defaultdict(Counter)
            try:
                for database in range(self._store.topology.database_count):
                    self._reading_database, self._touched, self._asked = database, {}, None
                    read = await self._store.count_by_app(database, functools.partial(self._ask, database))
                    for app_id, counts in read.counts.items():
                        totals[app_id].update(counts)
                    self._resolve(read.statuses)
                    self._counted_databases.add(database)
            finally:
                resolved = self._resolved
                self._counted_databases = None
                self._reading_database, self._touched, self._asked, self._resolved = None, {}, None, {}
            self._snapshot = dict(totals)
            self._since_snapshot = self._after_counted
            self._seen_by_the_pass = {
                task_id: last
                for task_id, (app_id, last) in resolved.items()
                if app_id is None and task_id in self._in_flight  # asked, not reported yet
            }
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
