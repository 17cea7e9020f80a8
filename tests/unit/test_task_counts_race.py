"""A task this node changes while a count pass reads its database is counted exactly once, whichever
side of the pass's snapshot its commit fell on and whenever it reported itself.

A pass's read of a logical database sees the rows committed when its counting statement began (its
snapshot). A change reports itself (:meth:`TaskCounts.changed`) after it committed, so a report during
the read says nothing of the side its commit fell on: carried past the pass, a change the snapshot saw
showed an app's one task as 2; dropped, one it missed showed a new task as 0 (a create, a pause and a
resume while the read ran) and let the quota pass (7 tasks stored under a quota of 5). So the node marks
what it is writing, and the store reads the status of those tasks in the counts' own snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import ExitStack
from types import SimpleNamespace

from tjobs.clock import ManualClock
from tjobs.model import TaskStatus
from tjobs.service.task_counts import TaskCounts
from tjobs.stores.base import DatabaseCounts
from tjobs.stores.contracts.tasks import no_tasks

APP = "app_1"
OLD, NEW = 1 << 22, (1 << 22) + 1  # two tasks of shard 0, database 0
ACTIVE, PAUSED = TaskStatus.ACTIVE, TaskStatus.PAUSED

Step = Callable[[], None]


class _SnapshotStore:
    """One logical database of rows (task id -> status). A read takes its snapshot after
    ``before_snapshot`` ran, counts, runs ``after_snapshot`` (commits that land after the snapshot),
    asks, reads the asked statuses from the snapshot, then runs ``after_ask``."""

    def __init__(self) -> None:
        self.topology = SimpleNamespace(database_count=1, tables_per_database=16)
        self.rows: dict[int, TaskStatus] = {OLD: ACTIVE}
        self.before_snapshot: list[Step] = []
        self.after_snapshot: list[Step] = []
        self.after_ask: list[Step] = []

    async def count_by_app(self, database: int, then_ask: Callable[[], Collection[int]] = no_tasks) -> DatabaseCounts:
        for step in self.before_snapshot:
            step()
        snapshot = dict(self.rows)
        for step in self.after_snapshot:
            step()
        counts: dict[str, dict[str, int]] = {}
        for status in snapshot.values():
            counts.setdefault(APP, {}).setdefault(status.value, 0)
            counts[APP][status.value] += 1
        asked = then_ask()
        statuses = {t: (snapshot[t].value if t in snapshot else None) for t in asked}
        for step in self.after_ask:
            step()
        self.before_snapshot, self.after_snapshot, self.after_ask = [], [], []
        return DatabaseCounts(counts, statuses)

    def stored(self, status: TaskStatus) -> int:
        return sum(1 for s in self.rows.values() if s is status)


class _Writes:
    """This node's writes as the task service makes them: marked while written, committed, reported."""

    def __init__(self, store: _SnapshotStore, counts: TaskCounts) -> None:
        self.store, self.counts, self.open = store, counts, ExitStack()

    def begin(self, task_id: int) -> Step:
        return lambda: self.open.enter_context(self.counts.writing((task_id,)))

    def commit(self, task_id: int, after: TaskStatus | None) -> Step:
        def step() -> None:
            if after is None:
                self.store.rows.pop(task_id, None)
            else:
                self.store.rows[task_id] = after

        return step

    def report(self, task_id: int, before: TaskStatus | None, after: TaskStatus | None, *, end: bool = True) -> Step:
        def step() -> None:
            self.counts.changed(APP, task_id, before, after)
            if end:
                self.open.close()

        return step


def _setup() -> tuple[_SnapshotStore, TaskCounts, _Writes]:
    store = _SnapshotStore()
    counts = TaskCounts(store, ManualClock(1_000_000), refresh_s=3600.0)  # type: ignore[arg-type]
    return store, counts, _Writes(store, counts)


def _exact(store: _SnapshotStore, counts: TaskCounts) -> None:
    for status in (ACTIVE, PAUSED):
        assert getattr(counts.of(APP), status.value) == store.stored(status), status
    assert sum(counts.active_split(APP)) == store.stored(ACTIVE)  # the quota


async def test_a_create_the_snapshot_saw_reported_during_the_read_counts_once() -> None:
    store, counts, writes = _setup()
    await counts.refresh()
    store.before_snapshot = [writes.begin(NEW), writes.commit(NEW, ACTIVE)]
    store.after_snapshot = [writes.report(NEW, None, ACTIVE)]
    await counts.refresh()
    _exact(store, counts)
    await counts.refresh()
    _exact(store, counts)


async def test_a_create_pause_and_resume_the_snapshot_missed_count_once() -> None:
    """The clean-clone run's case: a new task's stats said 0 active."""
    store, counts, writes = _setup()
    await counts.refresh()
    store.after_snapshot = [
        writes.begin(NEW),
        writes.commit(NEW, ACTIVE),
        writes.report(NEW, None, ACTIVE),
        writes.begin(NEW),
        writes.commit(NEW, PAUSED),
        writes.report(NEW, ACTIVE, PAUSED),
        writes.begin(NEW),
        writes.commit(NEW, ACTIVE),
        writes.report(NEW, PAUSED, ACTIVE),
    ]
    await counts.refresh()
    _exact(store, counts)
    await counts.refresh()
    _exact(store, counts)


async def test_a_write_in_flight_when_asked_counts_once_on_either_side_of_the_snapshot() -> None:
    for committed_before_the_snapshot in (True, False):
        for reported_after_the_pass in (True, False):
            store, counts, writes = _setup()
            await counts.refresh()
            commit = [writes.begin(NEW), writes.commit(NEW, ACTIVE)]
            if committed_before_the_snapshot:
                store.before_snapshot = commit
            else:
                store.after_snapshot = commit
            report = writes.report(NEW, None, ACTIVE)
            if not reported_after_the_pass:
                store.after_ask = [report]
            await counts.refresh()
            if reported_after_the_pass:
                report()
            _exact(store, counts)
            await counts.refresh()
            _exact(store, counts)


async def test_a_pause_reported_after_a_later_pass_began_counts_from_what_the_pass_before_saw() -> None:
    store, counts, writes = _setup()
    await counts.refresh()
    store.before_snapshot = [writes.begin(OLD), writes.commit(OLD, PAUSED)]  # seen, not reported
    await counts.refresh()
    report = writes.report(OLD, ACTIVE, PAUSED)
    store.before_snapshot = [report]  # reported as the next pass reads
    await counts.refresh()
    _exact(store, counts)


async def test_a_delete_the_snapshot_missed_never_counts_the_app_twice_below_what_is_stored() -> None:
    store, counts, writes = _setup()
    await counts.refresh()
    store.after_snapshot = [writes.begin(OLD), writes.commit(OLD, None), writes.report(OLD, ACTIVE, None)]
    await counts.refresh()
    _exact(store, counts)
