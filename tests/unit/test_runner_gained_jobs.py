"""The job runner's gained jobs whose load fails (their database session was ended under the node,
the server flapped): they are not counted as owned, so the coordinator handing the same set again
loads them and they fire what came due; the memory twin and a manual clock."""

from __future__ import annotations

import pytest

from tests.unit.test_runner_paused_shards import (
    LOST_SERVER_SHARDS,
    LOST_SHARD,
    SECOND,
    FlakyLoadStore,
    Harness,
    add_task,
)
from tjobs.errors import StorageUnavailable


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
