"""The store's service-level minutes: each node adds to its own rows, any node sums every node's."""

from __future__ import annotations

import pytest

from tjobs.model import SLO_LATENESS_SLOTS, SloCounts, SloMinute
from tjobs.stores.base import TaskStore

pytestmark = pytest.mark.asyncio

MINUTE = 29_000_000


def counts(fires: int, slot: int = 0, **others: int) -> SloCounts:
    lateness = tuple(fires if index == slot else 0 for index in range(SLO_LATENESS_SLOTS))
    return SloCounts(fires=fires, lateness=lateness, **others)


async def test_nodes_add_to_their_own_rows_and_sums_cover_every_node(store: TaskStore) -> None:
    await store.add_slo_minutes(
        "n1", [SloMinute("a", MINUTE, counts(2, delivered=2)), SloMinute("b", MINUTE, counts(1))]
    )
    await store.add_slo_minutes("n2", [SloMinute("a", MINUTE, counts(3, slot=4, dead=1, misses=2, throttled=5))])
    await store.add_slo_minutes("n1", [SloMinute("a", MINUTE, counts(1, delivered=1))])  # the same row again: added
    await store.add_slo_minutes("n1", [SloMinute("a", MINUTE + 1, counts(7))])

    a = await store.sum_slo_minutes("a", MINUTE, MINUTE + 1)
    assert (a.fires, a.delivered, a.dead, a.misses, a.throttled) == (6, 3, 1, 2, 5)
    assert a.lateness[0] == 3 and a.lateness[4] == 3 and sum(a.lateness) == 6
    assert (await store.sum_slo_minutes("a", MINUTE, MINUTE + 2)).fires == 13
    assert (await store.sum_slo_minutes(None, MINUTE, MINUTE + 1)).fires == 7
    assert await store.sum_slo_minutes("nobody", MINUTE, MINUTE + 2) == SloCounts()


async def test_purge_drops_only_minutes_before_the_cutoff(store: TaskStore) -> None:
    await store.add_slo_minutes("n1", [SloMinute("a", MINUTE + k, counts(1)) for k in range(5)])
    assert await store.purge_slo_minutes(MINUTE + 3, 2) == 2
    assert await store.purge_slo_minutes(MINUTE + 3, 100) == 1
    assert (await store.sum_slo_minutes("a", 0, MINUTE + 100)).fires == 2
