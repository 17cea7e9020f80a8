"""The reconciliation walks the shard tables one per step: the live nodes share them by rank, every table
of a node's share comes round once per round, and a step that fails leaves the next step to the next
table. Each step rests ``limits.task_count_reconcile_step_s`` first."""

from __future__ import annotations

import asyncio

import pytest

from sharding import Topology
from tjobs.cluster.limit_shares import Membership
from tjobs.model import TaskStatus
from tjobs.service.task_count_reconciler import TaskCountReconciler
from tjobs.stores.base import CountCorrection
from tjobs.stores.memory import MemoryTaskStore


class _Store(MemoryTaskStore):
    def __init__(self) -> None:
        super().__init__(Topology(1, 2, 6))  # 12 shard tables
        self.reconciled: list[int] = []
        self.failing: set[int] = set()

    async def reconcile_task_counts(self, shard: int) -> list[CountCorrection]:
        self.reconciled.append(shard)
        if shard in self.failing:
            raise ConnectionError("database down")
        return await super().reconcile_task_counts(shard)


async def test_a_node_recounts_each_table_of_its_share_once_per_round() -> None:
    store = _Store()
    reconciler = TaskCountReconciler(store, step_s=10.0, membership=lambda: Membership(3, 1))
    for _ in range(8):
        await reconciler.step()
    assert all(shard % 3 == 1 for shard in store.reconciled)
    assert sorted(store.reconciled[:4]) == [1, 4, 7, 10]  # one round: its four tables
    assert store.reconciled[4:] == store.reconciled[:4]  # the next round in the same order


async def test_a_sole_node_walks_every_table() -> None:
    store = _Store()
    reconciler = TaskCountReconciler(store, step_s=10.0)
    for _ in range(12):
        await reconciler.step()
    assert sorted(store.reconciled) == list(range(12))


async def test_the_loop_rests_before_each_step_and_a_failed_step_moves_on(caplog: pytest.LogCaptureFixture) -> None:
    store = _Store()
    rests: list[float] = []
    steps = asyncio.Event()

    async def rest(seconds: float) -> None:
        rests.append(seconds)
        if len(store.reconciled) >= 3:
            steps.set()
            await asyncio.Event().wait()  # until stopped
        await asyncio.sleep(0)

    reconciler = TaskCountReconciler(store, step_s=10.0, sleep=rest)
    store.failing = set(range(12))
    await reconciler.start()
    await asyncio.wait_for(steps.wait(), 5)
    await reconciler.stop()
    assert rests == [10.0] * 4
    assert len(set(store.reconciled)) == 3  # three tables, one after another, each failing
    assert [r.__dict__.get("action") for r in caplog.records].count("task_count_failed") == 3


async def test_a_step_sets_a_put_off_count_right_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    store = _Store()
    store.task_counts[("app-a", TaskStatus.ACTIVE.value, 5)] = 3  # no such task there
    reconciler = TaskCountReconciler(store, step_s=10.0)
    for _ in range(12):
        await reconciler.step()
    assert await store.read_task_counts(0) == {}  # set right: its row left at 0 is gone
    [record] = [r for r in caplog.records if r.__dict__.get("action") == "task_counts_corrected"]
    assert "app-a active -3" in record.getMessage()
