"""The retention sweeper (:mod:`tjobs.firing.retention`): a pass keeps deleting batches while rows are
old enough, within its budget, instead of one batch per shard per interval; a pass that spent its budget
stops there and the next one starts at that shard after a rest as long as the budget. The settings are
refused at start out of range, naming the field (docs/configuration.md)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sharding import Topology
from tests.contract.backends import NOW_MS, make_task, manual_flow
from tjobs.clock import ManualClock
from tjobs.firing.retention import RetentionSweeper
from tjobs.model import FlowStatus
from tjobs.settings import RetentionSettings, Settings
from tjobs.stores.memory import MemoryTaskStore

DAY_MS = 86_400_000
SHARDS = (2, 5, 9)


class CountingStore(MemoryTaskStore):
    """The memory twin, counting the purge statements and advancing a fake monotonic clock by each."""

    def __init__(self, seconds_per_statement: float) -> None:
        super().__init__(Topology.parse("1x1x64"))
        self.statements = 0
        self.visited: list[int] = []
        self.now_s = 0.0
        self.seconds_per_statement = seconds_per_statement

    async def purge(self, shard: int, finished_before_ms: int, limit: int) -> int:
        self.statements += 1
        self.visited.append(shard)
        self.now_s += self.seconds_per_statement
        return await super().purge(shard, finished_before_ms, limit)


async def _backlog(store: MemoryTaskStore, per_shard: int) -> int:
    """``per_shard`` delivered flows 31 days old in each of :data:`SHARDS`, plus an open one and a fresh one
    each (which stay)."""
    for shard in SHARDS:
        task = await store.insert_task(make_task(shard=shard))
        old = NOW_MS - 31 * DAY_MS
        for index in range(per_shard):
            await store.insert_manual_flow(task.id, manual_flow(task, old + index, FlowStatus.DELIVERED))
        await store.insert_manual_flow(task.id, manual_flow(task, old - 1, FlowStatus.PENDING))
        await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS, FlowStatus.DELIVERED))
    return per_shard * len(SHARDS)


async def _flows_left(store: MemoryTaskStore) -> int:
    return sum(len(flows) for flows in store._flows)


def _sweeper(store: CountingStore, **settings: float) -> RetentionSweeper:
    retention = RetentionSettings(**{"batch": 100, "interval_s": 60.0, "pass_budget_s": 5.0, **settings})
    return RetentionSweeper(store, lambda: frozenset(SHARDS), retention, ManualClock(NOW_MS), lambda: store.now_s)


async def test_a_backlog_larger_than_a_batch_is_cleared_in_one_pass_within_its_budget() -> None:
    store = CountingStore(seconds_per_statement=0.01)
    backlog = await _backlog(store, per_shard=1_050)  # 10.5 batches a shard
    sweeper = _sweeper(store)

    assert await sweeper.run_once() == backlog
    assert await _flows_left(store) == 2 * len(SHARDS)  # the open and the fresh flow of each shard
    assert not sweeper.backlog
    assert store.now_s <= 5.0 + 0.01
    assert store.statements == len(SHARDS) * 11  # ten full batches and the one that found fewer, a shard
    assert sweeper._interval_s == 60.0


async def test_a_pass_stops_when_its_budget_is_spent_and_the_next_resumes_sooner_where_it_stopped() -> None:
    store = CountingStore(seconds_per_statement=1.0)
    backlog = await _backlog(store, per_shard=1_000)
    sweeper = _sweeper(store, pass_budget_s=3.0)

    assert await sweeper.run_once() == 300  # three statements, the budget spent
    assert sweeper.backlog and sweeper._interval_s == 3.0  # the rest: as long as the budget
    purged = 300
    while sweeper.backlog:
        purged += await sweeper.run_once()
    assert purged == backlog
    assert await _flows_left(store) == 2 * len(SHARDS)
    assert sweeper._interval_s == 60.0


async def test_nothing_old_enough_costs_one_statement_a_shard() -> None:
    store = CountingStore(seconds_per_statement=0.001)
    await _backlog(store, per_shard=0)
    sweeper = _sweeper(store)
    assert await sweeper.run_once() == 0
    assert store.statements == len(SHARDS)


async def test_a_pass_visits_at_most_16_shards_and_the_next_goes_on_from_there() -> None:
    store = CountingStore(seconds_per_statement=0.001)
    settings = RetentionSettings(batch=100, interval_s=60.0, pass_budget_s=5.0)
    sweeper = RetentionSweeper(store, lambda: frozenset(range(1, 64, 2)), settings, ManualClock(NOW_MS), lambda: 0.0)
    for _ in range(3):
        assert await sweeper.run_once() == 0
    assert store.visited == [*range(1, 64, 2), *range(1, 32, 2)]  # 32 owned: 16, 16, then the first 16 again


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("days", 0),
        ("interval_s", 0),
        ("interval_s", 86_401),
        ("batch", 0),
        ("batch", 10_001),
        ("pass_budget_s", 0),
        ("pass_budget_s", 601),
    ],
)
def test_a_retention_setting_out_of_range_is_refused_naming_it(key: str, value: float) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(storage={"urls": ["memory://"], "topology": "1x1x4"}, retention={key: value})
    assert f"retention.{key}" in str(refused.value)
