"""An app's stats show the dead letters this node wrote at once, and a redrive's at once, as they show the
app's own task changes: waiting for the next count pass let a busy database hold a dead flow out of
``/v1/stats`` past ten seconds (test_stats_count_the_apps_tasks_fires_and_dead_letters[mariadb] in a
clean-clone run). Never counted twice: a pass that read the flow's database before the change carries
it, one that reads it after takes it from the rows."""

from __future__ import annotations

from collections.abc import Callable, Collection
from types import SimpleNamespace

from tjobs.clock import ManualClock
from tjobs.model import FlowStatus, FlowUpdate
from tjobs.observability.metrics import NullMetrics
from tjobs.observability.observer import MetricsObserver
from tjobs.observability.slo import ServiceLevels
from tjobs.service.task_counts import TaskCounts
from tjobs.stores.base import DEAD_LETTERS, DatabaseCounts
from tjobs.stores.contracts.tasks import no_tasks

APP = "app_1"
TASK_IN_DATABASE_0 = 1 << 22  # shard 0 of database 0
TASK_IN_DATABASE_1 = (1 << 22) | (16 << 12)  # shard 16: database 1 of 16 tables each


class _Store:
    """Two logical databases; ``dead`` is what a read of each finds. A hook runs once, at the start of
    the read of database 1 (database 0's read is over)."""

    def __init__(self) -> None:
        self.topology = SimpleNamespace(database_count=2, tables_per_database=16)
        self.dead = [0, 0]
        self.between_reads: Callable[[], None] = lambda: None

    async def count_by_app(self, database: int, then_ask: Callable[[], Collection[int]] = no_tasks) -> DatabaseCounts:
        if database == 1:
            self.between_reads()
        return DatabaseCounts({APP: {DEAD_LETTERS: self.dead[database]}}, {task_id: None for task_id in then_ask()})


def _counts(store: _Store) -> TaskCounts:
    return TaskCounts(store, ManualClock(1_000_000), refresh_s=3600.0)  # type: ignore[arg-type]


def _observer(counts: TaskCounts) -> MetricsObserver:
    clock = ManualClock(1_000_000)
    observer = MetricsObserver(NullMetrics(), ServiceLevels(clock.now_ms), clock.now_ms)
    observer.dead_letters = counts.dead_letter_changed
    return observer


def _dead(task_id: int) -> FlowUpdate:
    return FlowUpdate(task_id, 999_000, FlowStatus.DEAD, 1, None)


async def test_a_flow_this_node_wrote_dead_is_in_the_stats_at_once_and_its_redrive_takes_it_out() -> None:
    store = _Store()
    counts = _counts(store)
    await counts.refresh()
    observer = _observer(counts)

    observer.flow_update(APP, _dead(TASK_IN_DATABASE_0))
    assert counts.of(APP).dead_letters == 1  # no pass since

    store.dead[0] = 1  # the outcome landed; a pass reads it and the node's own change is dropped
    await counts.refresh()
    assert counts.of(APP).dead_letters == 1

    observer.flow_redriven(APP, TASK_IN_DATABASE_0, 999_000)
    assert counts.of(APP).dead_letters == 0
    observer.flow_update(APP, FlowUpdate(TASK_IN_DATABASE_0, 999_000, FlowStatus.DELIVERED, 2, None))
    assert counts.of(APP).dead_letters == 0


async def test_a_flow_written_dead_in_a_database_the_running_pass_has_read_is_carried_past_it() -> None:
    store = _Store()
    counts = _counts(store)
    observer = _observer(counts)

    def dies_after_database_0_was_read() -> None:
        store.between_reads = lambda: None
        observer.flow_update(APP, _dead(TASK_IN_DATABASE_0))
        store.dead[0] = 1  # landed after the read

    store.between_reads = dies_after_database_0_was_read
    await counts.refresh()
    assert counts.of(APP).dead_letters == 1  # carried: the snapshot missed it
    await counts.refresh()
    assert counts.of(APP).dead_letters == 1  # the next pass read it: not twice


async def test_a_flow_written_dead_in_a_database_the_running_pass_has_not_read_is_counted_once() -> None:
    store = _Store()
    counts = _counts(store)
    observer = _observer(counts)

    def dies_before_database_1_is_read() -> None:
        store.between_reads = lambda: None
        observer.flow_update(APP, _dead(TASK_IN_DATABASE_1))
        store.dead[1] = 1  # landed before the read of database 1's snapshot

    store.between_reads = dies_before_database_1_is_read
    await counts.refresh()
    assert counts.of(APP).dead_letters == 1
