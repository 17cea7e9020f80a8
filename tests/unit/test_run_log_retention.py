"""An app's run log retention (``run_log_retention_days``; README "Job runs") on the retention sweeper's
pass (:mod:`tjobs.firing.retention`): the logs of the app's flows that ended longer ago are cleared, the
flows, their runs and statuses stay; other apps' logs follow their flows; pages of ``batch`` flows under
the pass's budget, a walk that the budget stopped goes on where it stopped, a finished walk starts the
next at the first flow it left unsettled (a run that ended since), else after its last flow, so a pass
never walks again what it cleared."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from sharding import Topology
from tests.contract.backends import NOW_MS, make_task, manual_flow
from tjobs.clock import ManualClock
from tjobs.errors import StorageUnavailable
from tjobs.firing.retention import RetentionSweeper
from tjobs.model import App, Flow, FlowStatus, Task
from tjobs.settings import RetentionSettings
from tjobs.stores.contracts.runs import LogPurgePage
from tjobs.stores.memory import MemoryTaskStore

DAY_MS = 86_400_000
SHARD = 5
LINE = '{"at": 1, "attempt": 1, "line": "x"}\n'


class CountingStore(MemoryTaskStore):
    """The memory twin, counting the log purge's pages (and where each started) on a fake monotonic clock."""

    def __init__(self, seconds_per_statement: float = 0.001) -> None:
        super().__init__(Topology.parse("1x1x64"))
        self.pages: list[tuple[int, str, tuple[int, int] | None]] = []
        self.now_s = 0.0
        self.seconds_per_statement = seconds_per_statement

    async def purge(self, shard: int, finished_before_ms: int, limit: int) -> int:
        self.now_s += self.seconds_per_statement
        return await super().purge(shard, finished_before_ms, limit)

    async def purge_run_logs(
        self, shard: int, app_id: str, finished_before_ms: int, limit: int, after: tuple[int, int] | None = None
    ) -> LogPurgePage:
        self.pages.append((shard, app_id, after))
        self.now_s += self.seconds_per_statement
        return await super().purge_run_logs(shard, app_id, finished_before_ms, limit, after)


async def _app(store: MemoryTaskStore, app_id: str, days: float | None) -> None:
    settings = {} if days is None else {"run_log_retention_days": days}
    await store.put_app(App(app_id, app_id, "h-" + app_id, ["s"], settings=settings))


async def _logged(
    store: MemoryTaskStore, task: Task, at_ms: int, status: FlowStatus = FlowStatus.DELIVERED, ended_ms: int = 0
) -> Flow:
    flow = replace(manual_flow(task, at_ms, status), updated_at_ms=ended_ms or at_ms)
    await store.insert_manual_flow(task.id, flow)
    assert await store.append_run_log(task.id, at_ms, LINE * 2, 2, 100)
    return flow


async def _stored(store: MemoryTaskStore, flow: Flow) -> Flow:
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None
    return stored


def _sweeper(store: CountingStore, clock: ManualClock, **settings: float) -> RetentionSweeper:
    retention = RetentionSettings(**{"days": 30.0, "batch": 10, "interval_s": 60.0, "pass_budget_s": 5.0, **settings})
    return RetentionSweeper(store, lambda: frozenset({SHARD}), retention, clock, lambda: store.now_s)


async def test_the_apps_logs_older_than_its_policy_are_cleared_and_the_flows_kept() -> None:
    store = CountingStore()
    await _app(store, "app-a", 1)
    await _app(store, "app-b", None)  # no policy: its logs follow its flows (30 days)
    task = await store.insert_task(make_task(shard=SHARD, app_id="app-a"))
    other = await store.insert_task(make_task(shard=SHARD, app_id="app-b"))
    old = [
        await _logged(store, task, NOW_MS - 2 * DAY_MS + i, FlowStatus.DELIVERED if i % 2 else FlowStatus.DEAD)
        for i in range(25)
    ]
    fresh = await _logged(store, task, NOW_MS - DAY_MS // 2)
    others = await _logged(store, other, NOW_MS - 2 * DAY_MS)
    sweeper = _sweeper(store, ManualClock(NOW_MS))

    assert await sweeper.run_once() == 25  # logs cleared (no flow is old enough to go)
    for flow in old:
        stored = await _stored(store, flow)
        assert stored.run_log_purged and stored.status is flow.status and stored.run_log_lines == 2
    assert not (await _stored(store, fresh)).run_log_purged
    assert not (await _stored(store, others)).run_log_purged
    assert [app for _, app, _ in store.pages] == ["app-a"] * 3  # pages of 10: 10, 10, 5 (< 10: the end)
    assert sweeper.logs_cleared == 25 and not sweeper.backlog


async def test_a_policy_as_long_as_the_flows_retention_costs_no_statement() -> None:
    store = CountingStore()
    await _app(store, "app-a", 30)  # the flows' own retention purges the logs with them
    task = await store.insert_task(make_task(shard=SHARD, app_id="app-a"))
    await _logged(store, task, NOW_MS - 2 * DAY_MS)
    assert await _sweeper(store, ManualClock(NOW_MS)).run_once() == 0
    assert store.pages == []


async def test_a_walk_stopped_by_the_budget_goes_on_where_it_stopped() -> None:
    store = CountingStore(seconds_per_statement=1.0)
    await _app(store, "app-a", 1)
    task = await store.insert_task(make_task(shard=SHARD, app_id="app-a"))
    flows = [await _logged(store, task, NOW_MS - 3 * DAY_MS + i) for i in range(50)]
    sweeper = _sweeper(store, ManualClock(NOW_MS), pass_budget_s=3.0)

    first = await sweeper.run_once()  # the flows' purge (1 s), then two pages of logs: the budget spent
    assert first == 20 and sweeper.backlog and sweeper._interval_s == 3.0
    cleared = first
    while sweeper.backlog:
        cleared += await sweeper.run_once()
    assert cleared == 50
    assert [(await _stored(store, flow)).run_log_purged for flow in flows] == [True] * len(flows)
    starts = [after for _, _, after in store.pages]
    assert starts[:2] == [None, (flows[9].scheduled_at_ms, task.id)]
    assert starts[2] == (flows[19].scheduled_at_ms, task.id)  # the next pass: where the last stopped
    assert len(starts) == len(set(starts)) == 6  # five full pages and the short one: none read twice


async def test_the_next_walk_starts_at_the_first_run_left_open_else_after_the_last_flow() -> None:
    store = CountingStore()
    await _app(store, "app-a", 1)
    task = await store.insert_task(make_task(shard=SHARD, app_id="app-a"))
    clock = ManualClock(NOW_MS)
    before = [await _logged(store, task, NOW_MS - 3 * DAY_MS + i) for i in range(3)]
    live = await _logged(store, task, NOW_MS - 3 * DAY_MS + 10, FlowStatus.RUNNING)  # a long run, still live
    later = [await _logged(store, task, NOW_MS - 3 * DAY_MS + 20 + i) for i in range(3)]
    sweeper = _sweeper(store, clock)

    assert await sweeper.run_once() == 6
    assert not (await _stored(store, live)).run_log_purged

    # the run ends; two days later its log is due: the next walk starts at it, not at the first flow
    ended = replace(await _stored(store, live), status=FlowStatus.DELIVERED, updated_at_ms=NOW_MS)
    store._flows[SHARD][(live.task_id, live.scheduled_at_ms)] = ended
    clock.advance(2 * DAY_MS + 1)
    store.pages.clear()
    assert await sweeper.run_once() == 1
    assert (await _stored(store, live)).run_log_purged
    assert [after for _, _, after in store.pages] == [(live.scheduled_at_ms, live.task_id - 1)]

    # nothing left unsettled: the walk after starts after the last flow it read
    store.pages.clear()
    clock.advance(1000)
    assert await sweeper.run_once() == 0
    assert [start for _, _, start in store.pages] == [(later[-1].scheduled_at_ms, task.id)]
    assert [(await _stored(store, flow)).run_log_purged for flow in before + later] == [True] * 6


class AppsDown(CountingStore):
    """The apps' database does not answer; the shards' do."""

    async def list_apps(self) -> list[App]:
        raise StorageUnavailable("apps server down")


async def test_the_apps_database_down_leaves_the_flows_purge_running_and_skips_the_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = AppsDown()
    task = await store.insert_task(make_task(shard=SHARD, app_id="app-a"))
    await _logged(store, task, NOW_MS - 31 * DAY_MS)  # old enough for the flows' purge
    sweeper = _sweeper(store, ManualClock(NOW_MS))

    with caplog.at_level(logging.WARNING, logger="tjobs.firing.retention"):
        assert await sweeper.run_once() == 1
    assert sum(len(flows) for flows in store._flows) == 0 and store.pages == []
    assert any(r.__dict__.get("action") == "retention_run_logs_skipped" for r in caplog.records)


async def test_a_pass_without_the_apps_keeps_the_walks_places() -> None:
    store = CountingStore()
    await _app(store, "app-a", 1)
    task = await store.insert_task(make_task(shard=SHARD, app_id="app-a"))
    flows = [await _logged(store, task, NOW_MS - 3 * DAY_MS + i) for i in range(3)]
    sweeper = _sweeper(store, ManualClock(NOW_MS))
    assert await sweeper.run_once() == 3

    async def down() -> list[App]:
        raise StorageUnavailable("apps server down")

    listed = store.list_apps
    store.list_apps = down  # type: ignore[method-assign]
    assert await sweeper.run_once() == 0
    store.list_apps = listed  # type: ignore[method-assign]
    store.pages.clear()
    assert await sweeper.run_once() == 0
    assert [start for _, _, start in store.pages] == [(flows[-1].scheduled_at_ms, task.id)]  # not from the oldest
