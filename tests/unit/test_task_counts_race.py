"""A task stored while a count pass reads its database is never dropped from the counts.

A pass's read of a logical database sees the rows committed when its statement began (MVCC). A create
that commits after that instant reports itself (:meth:`TaskCounts.changed`) while the read is still
running: the pass's snapshot misses the task, so the change must outlive the pass. Dropping it
undercounts the app, and the quota then lets creates past it (a clean-clone run on MariaDB stored 7
tasks of an app whose quota was 5, 20 creates at once)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from tjobs.clock import ManualClock
from tjobs.model import TaskStatus
from tjobs.service.task_counts import TaskCounts

APP = "app_1"
TASK_IN_DATABASE_0 = 1 << 22  # shard 0 of database 0 (sharding.ids: time bits above 10 shard and 12 random bits)


class _CreateDuringTheRead:
    """Two logical databases, one stored task in database 0 before the pass; while the pass reads
    database 0 (its statement's snapshot already taken), a second task commits there and reports itself."""

    def __init__(self) -> None:
        self.topology = SimpleNamespace(database_count=2, tables_per_database=16)
        self.stored = 1
        self.create_during_the_read = True
        self.seen_by_the_read = False
        self.counts: TaskCounts | None = None

    async def count_by_app(self, database: int) -> dict[str, Counter[str]]:
        if database != 0:
            return {}
        seen = self.stored  # the read's snapshot
        if self.create_during_the_read:
            self.create_during_the_read = False
            self.stored += 1  # a create commits meanwhile ...
            if self.seen_by_the_read:
                seen = self.stored  # ... or had committed just before the snapshot
            assert self.counts is not None
            self.counts.changed(APP, TASK_IN_DATABASE_0 + 1, None, TaskStatus.ACTIVE)  # ... and reports itself
        return {APP: Counter({TaskStatus.ACTIVE.value: seen})}


async def test_a_create_reported_while_its_database_is_read_still_counts_after_the_pass() -> None:
    store = _CreateDuringTheRead()
    counts = TaskCounts(store, ManualClock(1_000_000), refresh_s=3600.0)  # type: ignore[arg-type]
    store.counts = counts
    await counts.refresh()
    assert sum(counts.active_split(APP)) >= store.stored == 2  # the quota: never fewer than stored
    assert counts.of(APP).active <= store.stored  # the stats: never the task twice
    await counts.refresh()  # the next pass, with nothing happening during it, is exact for both
    assert counts.of(APP).active == sum(counts.active_split(APP)) == 2


async def test_a_create_reported_while_its_database_is_read_and_seen_by_the_read_is_not_shown_twice() -> None:
    """The other order: the create committed before the read's snapshot but reported during the read (a
    clean-clone run's stats showed an app's one task as 2)."""
    store = _CreateDuringTheRead()
    store.seen_by_the_read = True
    counts = TaskCounts(store, ManualClock(1_000_000), refresh_s=3600.0)  # type: ignore[arg-type]
    store.counts = counts
    await counts.refresh()
    assert counts.of(APP).active == store.stored == 2
    assert sum(counts.active_split(APP)) >= 2


class _DeleteDuringTheRead(_CreateDuringTheRead):
    """Two stored tasks; one is deleted and reports itself while database 0 is read, and the read
    already missed it (the worse case for a quota: the removal counted twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.stored = 2

    async def count_by_app(self, database: int) -> dict[str, Counter[str]]:
        if database != 0:
            return {}
        if self.create_during_the_read:
            self.create_during_the_read = False
            self.stored -= 1
            assert self.counts is not None
            self.counts.changed(APP, TASK_IN_DATABASE_0 + 1, TaskStatus.ACTIVE, None)
        return {APP: Counter({TaskStatus.ACTIVE.value: self.stored})}


async def test_a_delete_reported_while_its_database_is_read_never_counts_the_app_below_what_is_stored() -> None:
    store = _DeleteDuringTheRead()
    counts = TaskCounts(store, ManualClock(1_000_000), refresh_s=3600.0)  # type: ignore[arg-type]
    store.counts = counts
    await counts.refresh()
    assert counts.of(APP).active == store.stored == 1
