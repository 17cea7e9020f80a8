"""The job runner when ownership moves (an etcd outage, a new plan), on the memory twin and a manual
clock: gained jobs whose load fails (their database session was ended under the node, the server
flapped) are not counted as owned, so the coordinator handing the same set again loads them; an
instant another owner fired first (two nodes briefly fire a shard while a plan changes) does not take
the task's later instants out of the wheel."""

from __future__ import annotations

import pytest

from tests.unit.test_runner_paused_shards import (
    LOST_SERVER_SHARDS,
    LOST_SHARD,
    SECOND,
    T0,
    FlakyLoadStore,
    Harness,
    add_task,
)
from tjobs.errors import StorageUnavailable
from tjobs.model import FireIntent


async def test_gained_jobs_whose_load_fails_are_loaded_when_handed_again() -> None:
    store = FlakyLoadStore()
    h = Harness(store)
    task = await add_task(store, LOST_SHARD)
    await h.start()
    every_shard = h.runner.owned
    try:
        # Given the node gave the shards up and their load fails when it gains them back
        await h.runner.set_owned(every_shard - LOST_SERVER_SHARDS)
        store.down = True
        with pytest.raises(StorageUnavailable):
            await h.runner.set_owned(every_shard)
        assert not h.runner.owned & LOST_SERVER_SHARDS

        # When the coordinator hands the same set again and the load answers
        store.down = False
        await h.runner.set_owned(every_shard)

        # Then the shards are owned and fire on time
        assert h.runner.owned == every_shard
        await h.move_to(1 * SECOND, until=lambda: h.sent_instants(task) == [1 * SECOND])
    finally:
        await h.runner.stop()


async def test_an_instant_another_owner_fired_first_leaves_the_next_one_in_the_wheel() -> None:
    store = FlakyLoadStore()
    h = Harness(store)
    task = await add_task(store, LOST_SHARD)
    await h.start()
    try:
        # Given another node (its plan not yet updated) that fires the task's first instant first
        assert h.runner.wheel.get(task.id) is not None
        other = await store.commit_fires(
            [FireIntent(task.id, T0 + 1 * SECOND, task.version)],
            T0 + 1 * SECOND,
            h.runner._planner,
        )
        assert other[0].task is not None

        # When this node's fire of the same instant is rejected, and the other node lets the job go
        await h.move_to(1 * SECOND)
        assert h.sent_instants(task) == []

        # Then this node fires the next instants on time, not only after the next cycle load
        await h.move_to(2 * SECOND, until=lambda: h.sent_instants(task) == [2 * SECOND])
        await h.move_to(3 * SECOND, until=lambda: h.sent_instants(task) == [2 * SECOND, 3 * SECOND])
    finally:
        await h.runner.stop()
