"""The store's hot change log (:class:`tjobs.stores.contracts.HotChangeLog`), the DB-poll hot tier's
storage: appended changes are read back by increasing id from any log of the store, and pruned by age.
How the tier copes with ids that become visible out of order or restart is the hot tier contract's
(``test_hot_tier_contract.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.contract.backends import IDS, NOW_MS
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts import HotChange, HotChangeLog

pytestmark = pytest.mark.asyncio


def change(shard: int = 3, *, created_at_ms: int = NOW_MS, next_run_at_ms: int | None = NOW_MS + 5_000) -> HotChange:
    return HotChange(IDS.mint(shard, NOW_MS), "app-a", next_run_at_ms, 2, "node-a", created_at_ms)


@pytest.fixture
async def log(store: TaskStore) -> AsyncIterator[HotChangeLog]:
    opened = store.hot_change_log()
    await opened.open()
    yield opened
    await opened.close()


async def test_an_empty_log_has_no_ids_and_nothing_to_read(log: HotChangeLog) -> None:
    assert await log.highest_id() == 0
    assert await log.last() is None
    assert await log.read_after(0, 10) == []


async def test_appended_changes_are_read_back_in_order_under_increasing_ids(log: HotChangeLog) -> None:
    first = [change(1), change(2, next_run_at_ms=None), change(15)]  # a stop, and a task id near 2**63
    await log.append(first)
    later = [change(4)]
    await log.append(later)
    logged = await log.read_after(0, 10)
    assert [row for _, row in logged] == first + later
    ids = [row_id for row_id, _ in logged]
    assert ids == sorted(ids) and len(set(ids)) == 4 and ids[0] > 0
    assert await log.highest_id() == ids[-1]
    assert await log.last() == logged[-1]


async def test_read_after_starts_above_the_id_and_stops_at_the_limit(log: HotChangeLog) -> None:
    changes = [change(shard) for shard in range(6)]
    await log.append(changes)
    ids = [row_id for row_id, _ in await log.read_after(0, 10)]
    assert [row for _, row in await log.read_after(ids[1], 3)] == changes[2:5]
    assert await log.read_after(ids[-1], 10) == []


async def test_every_log_of_the_store_reads_what_another_appended(store: TaskStore, log: HotChangeLog) -> None:
    other = store.hot_change_log()
    await other.open()
    try:
        written = change(7)
        await other.append([written])
        assert [row for _, row in await log.read_after(0, 10)] == [written]
    finally:
        await other.close()


async def test_prune_deletes_only_the_changes_created_before_the_cutoff(log: HotChangeLog) -> None:
    old, cutoff, young = change(1, created_at_ms=NOW_MS - 1), change(2, created_at_ms=NOW_MS), change(3)
    await log.append([old, cutoff, young])
    await log.prune(NOW_MS)
    assert [row for _, row in await log.read_after(0, 10)] == [cutoff, young]


async def test_read_after_leaves_out_one_origins_changes_but_the_last_of_the_log(log: HotChangeLog) -> None:
    # A DB-poll reader skips its own changes in the read, not after parsing them (issue 29), and still
    # learns from the log's last change how far the log goes.
    mine = [replace(change(shard), origin="node-a/1") for shard in (1, 2, 3)]
    theirs = replace(change(4), origin="node-b/1")
    earlier = replace(change(5), origin="node-a/0")  # the same node name, another incarnation
    await log.append([mine[0], theirs, mine[1], earlier, mine[2]])
    ids = [row_id for row_id, _ in await log.read_after(0, 10)]
    read = await log.read_after(0, 10, skip_origin="node-a/1")
    assert read == [(ids[1], theirs), (ids[3], earlier), (ids[4], mine[2])]  # mine[2] is the last
    assert await log.read_after(ids[1], 10, skip_origin="node-a/1") == [(ids[3], earlier), (ids[4], mine[2])]
    assert await log.read_after(ids[-1], 10, skip_origin="node-a/1") == []
    assert await log.read_after(0, 1, skip_origin="node-a/1") == [(ids[1], theirs)]  # the limit holds
    await log.append([replace(change(6), origin="node-b/1")])
    assert [row.origin for _, row in await log.read_after(ids[3], 10, skip_origin="node-a/1")] == ["node-b/1"]
