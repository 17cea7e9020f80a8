"""The quota's count of an app's active tasks never falls below what is stored, whichever side of a read
of the counts this node's write fell on, and is exact again once a read follows the write.

A read of the counts sees the writes committed before it. This node reports a change after it committed
(:meth:`TaskCounts.changed`), so a report that comes during or after the read says nothing of the side its
commit fell on. The held count adds such a change only if it adds an active task: counted twice at worst
(the quota refuses a create it could have taken, until the next read), never missed (a quota of 5 once let
7 tasks in when a racing create was dropped). Every interleaving of a write's begin, commit and report
with a read's start, snapshot and end is tried, for a create, a delete, a pause and a resume.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from types import SimpleNamespace

import pytest

from tjobs.clock import ManualClock
from tjobs.model import TaskStatus
from tjobs.service.task_counts import TaskCounts

APP = "app_1"
ACTIVE, PAUSED = TaskStatus.ACTIVE, TaskStatus.PAUSED
BEFORE, DURING_BEFORE_SNAPSHOT, DURING_AFTER_SNAPSHOT, AFTER = range(4)
CHANGES = {"create": (None, ACTIVE), "delete": (ACTIVE, None), "pause": (ACTIVE, PAUSED), "resume": (PAUSED, ACTIVE)}
PHASES = [(b, c, r) for b, c, r in itertools.product(range(4), repeat=3) if b <= c <= r]


class _Store:
    """One logical database of rows (task id -> status); a read runs the steps of its phases around
    the moment it takes its snapshot."""

    def __init__(self, rows: dict[int, TaskStatus]) -> None:
        self.topology = SimpleNamespace(database_count=1, tables_per_database=16)
        self.rows = rows
        self.during: dict[int, list[Callable[[], None]]] = {DURING_BEFORE_SNAPSHOT: [], DURING_AFTER_SNAPSHOT: []}

    async def read_task_counts(
        self, database_index: int, app_ids: Collection[str] | None = None
    ) -> dict[str, dict[str, int]]:
        for step in self.during[DURING_BEFORE_SNAPSHOT]:
            step()
        counts: dict[str, int] = {}
        for status in self.rows.values():
            counts[status.value] = counts.get(status.value, 0) + 1
        for step in self.during[DURING_AFTER_SNAPSHOT]:
            step()
        self.during = {DURING_BEFORE_SNAPSHOT: [], DURING_AFTER_SNAPSHOT: []}
        return {APP: counts}

    def active(self) -> int:
        return sum(1 for status in self.rows.values() if status is ACTIVE)


@pytest.mark.parametrize("phases", PHASES, ids=lambda p: "begin{}-commit{}-report{}".format(*p))
@pytest.mark.parametrize("change", sorted(CHANGES))
async def test_a_write_on_either_side_of_a_read_never_leaves_the_quota_count_below_the_stored(
    change: str, phases: tuple[int, int, int]
) -> None:
    before, after = CHANGES[change]
    rows = {1: ACTIVE, 2: PAUSED}
    task_id = 3
    if before is not None:
        rows[task_id] = before
    store = _Store(rows)
    counts = TaskCounts(store, ManualClock(1_000_000), refresh_s=3600.0)  # type: ignore[arg-type]
    await counts.refresh()  # an earlier read
    begun: list[int] = []

    def begin() -> None:
        begun.append(counts.epoch())

    def commit() -> None:
        if after is None:
            del store.rows[task_id]
        else:
            store.rows[task_id] = after

    def report() -> None:
        counts.changed(APP, before, after, begun[0])

    steps = list(zip(phases, (begin, commit, report), strict=True))
    for phase, step in steps:
        if phase == BEFORE:
            step()
    for phase, step in steps:
        if phase in store.during:
            store.during[phase].append(step)
    await counts.refresh()
    for phase, step in steps:
        if phase == AFTER:
            step()

    counted, since = counts.active_split(APP)
    assert counted + since >= store.active()  # never below: the quota never admits past what is stored
    if phases[2] == BEFORE or phases[0] == AFTER:  # reported before the read, or begun after it: exact
        assert counted + since == store.active()
    await counts.refresh()
    assert sum(counts.active_split(APP)) == store.active()  # the next read is exact
